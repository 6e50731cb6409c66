package proxy

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// unitlessFields are the numeric log fields that are counts or identifiers,
// which have no unit. Every other numeric field names its unit at the end
// of its name: seconds or bytes, the units of the metrics.
var unitlessFields = map[string]bool{
	"conn":            true,
	"keyspaces":       true,
	"max_connections": true,
	"nodes":           true,
	"opcode":          true,
	"port":            true,
	"proxies":         true,
	"requests":        true,
	"stream":          true,
	"tables":          true,
	"tokens":          true,
	"version":         true,
}

// numericField are zerolog's methods that write a number.
var numericField = map[string]bool{
	"Int": true, "Int8": true, "Int16": true, "Int32": true, "Int64": true,
	"Uint": true, "Uint8": true, "Uint16": true, "Uint32": true, "Uint64": true,
	"Float32": true, "Float64": true,
	"Ints": true, "Ints64": true, "Uints": true, "Uints64": true, "Floats32": true, "Floats64": true,
}

// unitFromGlobal are zerolog's methods whose number's unit comes from
// zerolog.DurationFieldUnit, a global, and that a field name cannot follow.
var unitFromGlobal = map[string]bool{"Dur": true, "Durs": true, "TimeDiff": true}

// TestLogFieldsNameTheirUnits reads every log call of cqlguard's source
// (all but the test harness under test/) and checks that a number logged
// is a count or names its unit, so that a reader of "took_seconds":0.08
// needs no source to know what 0.08 is. zerolog's own duration methods are
// not used: the unit they write is a process-wide setting.
func TestLogFieldsNameTheirUnits(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..")
	fset := token.NewFileSet()
	calls := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "node_modules" ||
				path == filepath.Join(root, "test")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			method, key, ok := logField(n)
			if !ok {
				return true
			}
			calls++
			pos := fset.Position(n.Pos())
			switch {
			case unitFromGlobal[method]:
				t.Errorf("%s: %s(%q): write the duration as %s_seconds with Float64(key, d.Seconds())", pos, method, key, key)
			case numericField[method] && !unitlessFields[key] &&
				!strings.HasSuffix(key, "seconds") && !strings.HasSuffix(key, "bytes"):
				t.Errorf("%s: %s(%q): a number in a log field names its unit (_seconds, _bytes) or is a count listed in unitlessFields", pos, method, key)
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if calls == 0 {
		t.Fatal("found no log fields: the walk missed the source")
	}
}

// logField reports whether n looks like a zerolog field call, a method
// called with a literal key and one value (flag.Int and friends take three
// arguments), and returns the method and the key.
func logField(n ast.Node) (method, key string, ok bool) {
	call, ok := n.(*ast.CallExpr)
	if !ok || len(call.Args) != 2 {
		return "", "", false
	}
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok || !numericField[sel.Sel.Name] && !unitFromGlobal[sel.Sel.Name] {
		return "", "", false
	}
	lit, ok := call.Args[0].(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", "", false
	}
	key, err := strconv.Unquote(lit.Value)
	if err != nil {
		return "", "", false
	}
	return sel.Sel.Name, key, true
}
