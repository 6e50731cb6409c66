// This file reads a configuration file: one YAML document (yaml.v3) of
// the keys Config's yaml tags name, over Default. An empty file means all
// defaults; a second document in the file is ignored. Unknown keys, and
// values of the wrong type, are errors that name the file and line; so are
// Validate's errors about a key, whose line is looked up in the document.

package config

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Load reads the YAML file at path over Default and validates the result,
// as Parse does.
func Load(path string) (Config, error) {
	data, err := readFile(path)
	if err != nil {
		return Default(), err
	}
	return Parse(path, data)
}

func readFile(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading config: %w", err)
	}
	return data, nil
}

// Parse parses data, the contents of the file at path, over Default and
// validates the result. Unknown keys are errors; errors name path and,
// where known, the line. Values of the wrong type and failed checks are
// all reported together, one per line.
func Parse(path string, data []byte) (Config, error) {
	cfg, err := Decode(path, data)
	if err != nil && !Partial(err) {
		return cfg, err
	}
	// A value of the wrong type leaves its key at the default: the rest
	// is still worth checking, so that one attempt shows every mistake.
	return cfg, errors.Join(err, Check(&cfg, data))
}

// Read reads the file at path and decodes it as Decode does, without
// validating it, for a caller that applies flags and the environment over
// the file first; Check then validates. It returns the file's contents,
// which Check needs to name lines.
func Read(path string) (Config, []byte, error) {
	data, err := readFile(path)
	if err != nil {
		return Default(), nil, err
	}
	cfg, err := Decode(path, data)
	return cfg, data, err
}

// Decode parses data, the contents of the file at path, over Default,
// without validating the result. Unknown keys are errors naming path and
// the line.
func Decode(path string, data []byte) (Config, error) {
	cfg := Default()
	cfg.file, cfg.sum = path, sha256.Sum256(data)
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	// io.EOF: an empty file means all defaults.
	if err := dec.Decode(&cfg); err != nil && !errors.Is(err, io.EOF) {
		return cfg, &decodeError{msg: describeYAMLError(path, err), err: err}
	}
	return cfg, nil
}

// Partial reports whether err, from Decode or Read, still left the rest
// of the file decoded: only some values were of the wrong type, so that
// Check can report the problems of the rest with them.
func Partial(err error) bool { return errors.As(err, new(*yaml.TypeError)) }

// decodeError is a YAML error described with file and lines; it unwraps to
// yaml.v3's, so that a caller can tell a *yaml.TypeError, after which the
// rest of the document was still decoded.
type decodeError struct {
	msg string
	err error
}

func (e *decodeError) Error() string { return e.msg }
func (e *decodeError) Unwrap() error { return e.err }

// Check validates cfg, decoded from data, naming its file and, where the
// value comes from the file, the line of each problem. Every problem is
// reported, one per line.
func Check(cfg *Config, data []byte) error {
	return locateAll(cfg, data, cfg.Validate())
}

// locateAll has locate name cfg's file and the lines in data of each
// error err joins; without a file it returns err as it is.
func locateAll(cfg *Config, data []byte, err error) error {
	if err == nil || cfg.file == "" {
		return err
	}
	var errs []error
	for _, e := range unjoin(err) {
		errs = append(errs, locate(cfg.file, data, e))
	}
	return errors.Join(errs...)
}

// Warnings returns what in cfg, decoded from data, passes its checks but
// is likely a mistake, one line each, naming its file and, where the value
// comes from the file, the line, as Check does. The proxy runs with it.
func Warnings(cfg *Config, data []byte) []string {
	var ws problems
	cfg.Clients.warn(&ws)
	out := make([]string, 0, len(ws))
	for _, w := range ws {
		if cfg.file != "" {
			w = locate(cfg.file, data, w)
		}
		out = append(out, w.Error())
	}
	return out
}

// unjoin returns the errors err joins, or err alone.
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// locate prefixes err with file and, for a keyError whose key is in data,
// the line.
func locate(file string, data []byte, err error) error {
	var ke *keyError
	if errors.As(err, &ke) {
		if line := lineOf(data, ke.path); line > 0 {
			return fmt.Errorf("%s:%d: %w", file, line, err)
		}
	}
	return fmt.Errorf("%s: %w", file, err)
}

// keyError is a Validate error about the value at a key path, so that
// Parse can name the line it is on.
type keyError struct {
	path []string // keys from the top of the document
	err  error
}

func (e *keyError) Error() string { return strings.Join(e.path, ".") + ": " + e.err.Error() }
func (e *keyError) Unwrap() error { return e.err }

// lineOf returns the line of the key at path in the YAML document data, or
// 0 if it cannot be found.
func lineOf(data []byte, path []string) int {
	var doc yaml.Node
	if yaml.Unmarshal(data, &doc) != nil || len(doc.Content) == 0 {
		return 0
	}
	n, line := doc.Content[0], 0
	for _, key := range path {
		if n.Kind == yaml.SequenceNode {
			// A list's element is named by its index.
			i, err := strconv.Atoi(key)
			if err != nil || i < 0 || i >= len(n.Content) {
				return 0
			}
			n, line = n.Content[i], n.Content[i].Line
			continue
		}
		if n.Kind != yaml.MappingNode {
			return 0
		}
		found := false
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == key {
				n, line, found = n.Content[i+1], n.Content[i].Line, true
				break
			}
		}
		if !found {
			return 0
		}
	}
	return line
}

var (
	yamlLine    = regexp.MustCompile(`line (\d+): (.*)`)
	yamlUnknown = regexp.MustCompile(`^field (\S+) not found in type \S+$`)
)

// describeYAMLError turns yaml.v3's messages into "file:line: message".
func describeYAMLError(path string, err error) string {
	var lines []string
	for _, l := range strings.Split(err.Error(), "\n") {
		l = strings.TrimSpace(strings.TrimPrefix(l, "yaml: unmarshal errors:"))
		l = strings.TrimPrefix(l, "yaml: ")
		if l == "" {
			continue
		}
		if m := yamlLine.FindStringSubmatch(l); m != nil {
			msg := m[2]
			if f := yamlUnknown.FindStringSubmatch(msg); f != nil {
				msg = fmt.Sprintf("unknown key %q", f[1])
			}
			l = fmt.Sprintf("%s:%s: %s", path, m[1], msg)
		} else {
			l = path + ": " + l
		}
		lines = append(lines, l)
	}
	return strings.Join(lines, "\n")
}

// valueError is a value of n that its type cannot take. It is a
// *yaml.TypeError, after which yaml.v3 goes on decoding the rest of the
// document, so that its other problems are reported too.
func valueError(n *yaml.Node, msg string) error {
	return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: %s", n.Line, msg)}}
}
