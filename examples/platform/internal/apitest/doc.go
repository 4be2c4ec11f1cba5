// Package apitest serves a platform for the tests of several packages:
// a store's use cases behind api.Handler in an httptest server, and a
// client that sends it readings and requests as an agent and the admin
// do.
package apitest
