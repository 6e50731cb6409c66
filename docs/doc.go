// Package docs holds cqlguard's documentation. It has no code: its tests
// check that the documentation's relative links resolve and that every
// configuration key is documented.
package docs
