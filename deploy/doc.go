// Package deploy holds the files that deploy cqlguard, under kubernetes/,
// and the tests that check them: every manifest decodes strictly into its
// Kubernetes API type, the configuration it carries passes cqlguard's own
// checks, and the container image builds and serves where a Docker engine
// runs. It has no code of its own.
package deploy
