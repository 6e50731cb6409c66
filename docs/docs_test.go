package docs

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/cqlguard/cqlguard/config"
)

// markdownFiles are the documents whose links are checked, relative to the
// repository's top directory.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	files := []string{"../README.md", "../TESTING.md", "../deploy/README.md"}
	docs, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	return append(files, docs...)
}

var (
	fence      = regexp.MustCompile("^\\s*(```|~~~)")
	inlineCode = regexp.MustCompile("`[^`]*`")
	link       = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	heading    = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
)

// prose returns the lines of a Markdown document outside fenced code
// blocks, with inline code removed.
func prose(text string) []string {
	var out []string
	inFence := false
	for _, line := range strings.Split(text, "\n") {
		if fence.MatchString(line) {
			inFence = !inFence
			continue
		}
		if !inFence {
			out = append(out, line)
		}
	}
	return out
}

// anchors returns the anchors GitHub gives a document's headings:
// lowercased, punctuation but hyphens and underscores dropped, spaces
// turned into hyphens, and a repeated one numbered from 1.
func anchors(text string) map[string]bool {
	seen := map[string]int{}
	out := map[string]bool{}
	for _, line := range prose(text) {
		m := heading.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		title := strings.ReplaceAll(m[1], "`", "")
		var b strings.Builder
		for _, r := range strings.ToLower(title) {
			switch {
			case r == ' ':
				b.WriteByte('-')
			case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127:
				b.WriteRune(r)
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			out[a+"-"+strconv.Itoa(n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

// TestLinks checks that every relative link of the documents names a file
// or directory that exists and, for a Markdown file, a heading it has.
func TestLinks(t *testing.T) {
	t.Parallel()
	texts := map[string]string{}
	read := func(path string) (string, bool) {
		if s, ok := texts[path]; ok {
			return s, true
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return "", false
		}
		texts[path] = string(b)
		return texts[path], true
	}
	for _, file := range markdownFiles(t) {
		text, ok := read(file)
		if !ok {
			t.Errorf("%s: missing", file)
			continue
		}
		for _, line := range prose(text) {
			line = inlineCode.ReplaceAllString(line, "")
			for _, m := range link.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				path, anchor, _ := strings.Cut(target, "#")
				resolved := file
				if path != "" {
					resolved = filepath.Join(filepath.Dir(file), path)
					if _, err := os.Stat(resolved); err != nil {
						t.Errorf("%s: link %q: %v", file, target, err)
						continue
					}
				}
				if anchor == "" || !strings.HasSuffix(resolved, ".md") {
					continue
				}
				other, _ := read(resolved)
				if !anchors(other)[anchor] {
					t.Errorf("%s: link %q: %s has no heading with that anchor", file, target, resolved)
				}
			}
		}
	}
}

// configKeys adds to out the dotted path of every key of the
// configuration file under path, from the yaml tags of t: a map's keys are
// written "<>" and a list's elements "[]".
func configKeys(path string, t reflect.Type, out map[string]bool) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t.Kind() == reflect.Struct:
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if !f.IsExported() || name == "" || name == "-" {
				continue
			}
			if path != "" {
				name = path + "." + name
			}
			configKeys(name, f.Type, out)
		}
	case t.Kind() == reflect.Map && isStruct(t.Elem()):
		configKeys(path+".<>", t.Elem(), out)
	case t.Kind() == reflect.Slice && isStruct(t.Elem()):
		configKeys(path+"[]", t.Elem(), out)
	default:
		out[path] = true
	}
}

func isStruct(t reflect.Type) bool {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t.Kind() == reflect.Struct
}

// The first cell of a row of the keys table, and what names a map key.
var (
	keyRow      = regexp.MustCompile("^\\|\\s*(`[^|]*)\\|")
	backticked  = regexp.MustCompile("`([^`]+)`")
	placeholder = regexp.MustCompile(`<[^>]*>`)
)

// documentedKeys returns the keys the table of configuration.md names. A
// cell may name several: "`a.b.c`, `.d`" is a.b.c and a.b.d.
func documentedKeys(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile("configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]bool{}
	for _, line := range prose(string(b)) {
		m := keyRow.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		parent := ""
		for _, k := range backticked.FindAllStringSubmatch(m[1], -1) {
			key := placeholder.ReplaceAllString(k[1], "<>")
			if strings.HasPrefix(key, ".") {
				key = parent + key
			}
			if i := strings.LastIndex(key, "."); i >= 0 {
				parent = key[:i]
			}
			keys[key] = true
		}
	}
	return keys
}

// TestConfigKeysDocumented checks that docs/configuration.md's table names
// every key config.Config reads, itself or a section holding it, and no
// key that config.Config does not read.
func TestConfigKeysDocumented(t *testing.T) {
	t.Parallel()
	keys := map[string]bool{}
	configKeys("", reflect.TypeOf(config.Config{}), keys)
	documented := documentedKeys(t)
	covered := func(key string) bool {
		for k := range documented {
			if key == k || strings.HasPrefix(key, k+".") {
				return true
			}
		}
		return false
	}
	var missing, unknown []string
	for k := range keys {
		if !covered(k) {
			missing = append(missing, k)
		}
	}
	for d := range documented {
		found := false
		for k := range keys {
			if k == d || strings.HasPrefix(k, d+".") {
				found = true
				break
			}
		}
		if !found {
			unknown = append(unknown, d)
		}
	}
	sort.Strings(missing)
	sort.Strings(unknown)
	if len(missing) > 0 {
		t.Errorf("keys missing from docs/configuration.md's table: %s", strings.Join(missing, ", "))
	}
	if len(unknown) > 0 {
		t.Errorf("docs/configuration.md's table names keys the configuration does not have: %s", strings.Join(unknown, ", "))
	}
	if len(keys) < 50 {
		t.Errorf("found only %d configuration keys: the walk of config.Config is broken", len(keys))
	}
}
