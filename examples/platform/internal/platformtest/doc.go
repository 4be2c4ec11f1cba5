// Package platformtest holds what the platform's tests share across its
// packages: fixtures and helpers, so that no test copies another's.
package platformtest
