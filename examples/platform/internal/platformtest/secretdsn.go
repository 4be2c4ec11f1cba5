package platformtest

// DSNSecret is the secret every -db value of the tests holds, in some
// spelling.
const DSNSecret = "Sekr1t"

// SecretDSNs are -db values, each with DSNSecret in a place a secret
// goes, some of which parse.
var SecretDSNs = []string{
	"postgres://u:" + DSNSecret + "@127.0.0.1:1/db",
	"postgres://u:" + DSNSecret + "%40x@127.0.0.1:1/db?sslmode=disable",
	"postgresql://u@127.0.0.1:1/db?password=" + DSNSecret + "&sslmode=disable",
	"postgres://u@127.0.0.1:1/db?sslmode=disable&sslpassword=" + DSNSecret + "&PassWord=" + DSNSecret,
	"postgres://u@127.0.0.1:1/db?sslmode=require&sslkey=/tmp/" + DSNSecret + "/k.pem&sslcert=/tmp/c.pem",
	"postgres://u:" + DSNSecret + "@[bad/db",
	"postgres://u:a/" + DSNSecret + "@host/db",
	"postgres://u:" + DSNSecret + "@host:port/db",
	"host=127.0.0.1 port=1 user=u password=" + DSNSecret + " dbname=db sslmode=disable",
	"host=127.0.0.1 password = '" + DSNSecret + `\' x' dbname=db`,
	"host=127.0.0.1 password='x " + DSNSecret,
	"host=127.0.0.1 sslpassword=" + DSNSecret + " sslmode=disable",
	"host=127.0.0.1 sslmode=require sslcert=/tmp/c.pem sslkey=/tmp/" + DSNSecret + ".pem",
	"host=127.0.0.1 password=" + DSNSecret + " port=notaport",
	"host=127.0.0.1 password=" + DSNSecret + " bogus",
	"mysql://u:" + DSNSecret + "@h/db",
}
