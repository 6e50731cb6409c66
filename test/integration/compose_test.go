package integration

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"gopkg.in/yaml.v3"
)

// No Docker engine runs in CI, so docker-compose.yml is checked here: it
// parses, and its services are wired as the README says.
func TestDockerComposeFile(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot(), "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var compose struct {
		Services map[string]struct {
			Image     string         `yaml:"image"`
			Build     any            `yaml:"build"`
			Command   []string       `yaml:"command"`
			Ports     []string       `yaml:"ports"`
			DependsOn any            `yaml:"depends_on"`
			Configs   []any          `yaml:"configs"`
			Extra     map[string]any `yaml:",inline"`
		} `yaml:"services"`
		Configs map[string]struct {
			Content string `yaml:"content"`
		} `yaml:"configs"`
		Name string `yaml:"name"`
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&compose); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	for _, name := range []string{"scylla", "cqlguard", "prometheus"} {
		if _, ok := compose.Services[name]; !ok {
			t.Errorf("service %s missing", name)
		}
	}
	if compose.Services["cqlguard"].Build == nil {
		t.Error("cqlguard must build from the Dockerfile")
	}
	var prom map[string]any
	if err := yaml.Unmarshal([]byte(compose.Configs["prometheus"].Content), &prom); err != nil || prom["scrape_configs"] == nil {
		t.Errorf("prometheus config does not parse or scrapes nothing: %v", err)
	}
	if _, err := os.Stat(filepath.Join(repoRoot(), "Dockerfile")); err != nil {
		t.Error(err)
	}
}
