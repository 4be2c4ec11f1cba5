package chromium

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPage types into a form of a page without script and submits it
// with Enter: the server gets the field, and the answer's page is read
// and shot.
func TestPage(t *testing.T) {
	Need(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			fmt.Fprintf(w, "<!doctype html><p id=got>got %s from %s</p>", r.PostFormValue("name"), r.Header.Get("Sec-Fetch-Site"))
			return
		}
		fmt.Fprint(w, `<!doctype html><form method=post><input id=name name=name><button>Send</button></form>`)
	}))
	defer srv.Close()
	p := Start(t, 800, 600)
	p.Navigate(srv.URL)
	p.TypeIn("#name", "nodekit")
	p.Enter("the form")
	if got := p.HTML(); !strings.Contains(got, "got nodekit from same-origin") {
		t.Fatalf("the answer's page:\n%s", got)
	}
	shot := filepath.Join(t.TempDir(), "page.png")
	p.Screenshot(shot)
	if fi, err := os.Stat(shot); err != nil || fi.Size() < 1000 {
		t.Fatalf("screenshot: %v %v", fi, err)
	}
	if dom := Run(t, srv.URL, "--dump-dom"); !strings.Contains(dom, `<input id="name" name="name">`) {
		t.Errorf("--dump-dom:\n%s", dom)
	}
}
