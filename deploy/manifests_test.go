package deploy

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/cqlguard/cqlguard/config"
)

// The manifests are checked the way the API server reads them, without a
// cluster: each YAML document becomes JSON (duplicate keys are errors),
// which decodes into the Go type its apiVersion and kind name,
// case-sensitively, with unknown and duplicate fields as errors. The
// kustomization is not an API object; it decodes into the few fields it
// uses, as strictly.

const manifestDir = "kubernetes"

// configKey is the ConfigMap key that holds cqlguard's configuration file.
const configKey = "cqlguard.yaml"

// kustomization is the part of kustomize's Kustomization the manifests use.
type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Resources  []string `json:"resources"`
	Images     []struct {
		Name    string `json:"name"`
		NewName string `json:"newName"`
		NewTag  string `json:"newTag"`
	} `json:"images"`
}

// document is one decoded YAML document of a manifest file.
type document struct {
	name string // file#index, for messages
	obj  any    // *appsv1.Deployment, *corev1.ConfigMap, *corev1.Secret or *kustomization
}

// splitDocuments splits a YAML stream on its "---" lines, dropping
// documents that hold only comments or space.
func splitDocuments(data []byte) [][]byte {
	var docs [][]byte
	var cur []byte
	flush := func() {
		for _, l := range strings.Split(string(cur), "\n") {
			if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
				docs = append(docs, cur)
				break
			}
		}
		cur = nil
	}
	for _, line := range bytes.SplitAfter(data, []byte("\n")) {
		if strings.TrimRight(string(line), " \t\r\n") == "---" {
			flush()
			continue
		}
		cur = append(cur, line...)
	}
	flush()
	return docs
}

// decodeStrict decodes one YAML document into the type its apiVersion and
// kind name.
func decodeStrict(doc []byte) (any, error) {
	js, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return nil, err
	}
	var tm struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := kjson.UnmarshalCaseSensitivePreserveInts(js, &tm); err != nil {
		return nil, fmt.Errorf("apiVersion and kind: %w", err)
	}
	var obj any
	switch tm.APIVersion + " " + tm.Kind {
	case "apps/v1 Deployment":
		obj = new(appsv1.Deployment)
	case "v1 ConfigMap":
		obj = new(corev1.ConfigMap)
	case "v1 Secret":
		obj = new(corev1.Secret)
	case "kustomize.config.k8s.io/v1beta1 Kustomization":
		obj = new(kustomization)
	default:
		return nil, fmt.Errorf("apiVersion %q kind %q: not a kind these manifests use", tm.APIVersion, tm.Kind)
	}
	strict, err := kjson.UnmarshalStrict(js, obj)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", tm.Kind, err)
	}
	if len(strict) > 0 {
		return nil, fmt.Errorf("%s: %w", tm.Kind, errors.Join(strict...))
	}
	return obj, nil
}

// checkDocument decodes doc strictly and, for a ConfigMap that carries
// cqlguard's configuration, checks that with cqlguard's own loader.
func checkDocument(name string, doc []byte) (any, error) {
	obj, err := decodeStrict(doc)
	if err != nil {
		return nil, err
	}
	if cm, ok := obj.(*corev1.ConfigMap); ok {
		if data, ok := cm.Data[configKey]; ok {
			if _, err := config.Parse(name+" "+configKey, []byte(data)); err != nil {
				return nil, err
			}
		}
	}
	return obj, nil
}

// readManifests checks every document of every YAML file in dir.
func readManifests(t *testing.T, dir string) []document {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in %s: %v", dir, err)
	}
	var docs []document
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range splitDocuments(data) {
			name := fmt.Sprintf("%s#%d", f, i)
			obj, err := checkDocument(name, doc)
			if err != nil {
				t.Errorf("%s: %v", name, err)
				continue
			}
			docs = append(docs, document{name: name, obj: obj})
		}
	}
	return docs
}

func TestKubernetesManifests(t *testing.T) {
	t.Parallel()
	docs := readManifests(t, manifestDir)
	if t.Failed() {
		return
	}
	var (
		deps    []*appsv1.Deployment
		cms     = map[string]*corev1.ConfigMap{}
		secrets = map[string]*corev1.Secret{}
		kust    *kustomization
	)
	for _, d := range docs {
		switch o := d.obj.(type) {
		case *appsv1.Deployment:
			deps = append(deps, o)
		case *corev1.ConfigMap:
			cms[o.Name] = o
		case *corev1.Secret:
			secrets[o.Name] = o
		case *kustomization:
			kust = o
		}
	}
	if len(deps) != 1 || len(cms) != 1 || len(secrets) != 1 || kust == nil {
		t.Fatalf("want one Deployment, ConfigMap, Secret and kustomization, got %d, %d, %d and %v", len(deps), len(cms), len(secrets), kust != nil)
	}
	checkKustomization(t, kust)
	checkSidecar(t, deps[0], cms, secrets)
}

// checkKustomization checks that the kustomization lists every manifest
// and only those.
func checkKustomization(t *testing.T, k *kustomization) {
	files, _ := filepath.Glob(filepath.Join(manifestDir, "*.yaml"))
	var want []string
	for _, f := range files {
		if b := filepath.Base(f); b != "kustomization.yaml" {
			want = append(want, b)
		}
	}
	got := slices.Sorted(slices.Values(k.Resources))
	if !slices.Equal(got, want) {
		t.Errorf("kustomization resources %v, want the manifests %v", got, want)
	}
}

// checkSidecar checks that the Deployment's cqlguard container finds what
// it refers to: the ConfigMap holding its file where it reads it, the
// Secret keys behind the environment the file names, and probes and
// Prometheus pointed at its admin port. The environment is applied over
// the file as cqlguard does, and the result checked again.
func checkSidecar(t *testing.T, dep *appsv1.Deployment, cms map[string]*corev1.ConfigMap, secrets map[string]*corev1.Secret) {
	spec := dep.Spec.Template.Spec
	var c *corev1.Container
	for i := range spec.InitContainers {
		if spec.InitContainers[i].Name == "cqlguard" {
			c = &spec.InitContainers[i]
		}
	}
	if c == nil {
		t.Fatal("no cqlguard init container")
	}
	if c.RestartPolicy == nil || *c.RestartPolicy != corev1.ContainerRestartPolicyAlways {
		t.Error("cqlguard must be a sidecar: an init container with restartPolicy Always")
	}

	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
		if ref := e.ValueFrom; ref != nil && ref.SecretKeyRef != nil {
			var inData, inString bool
			if s, ok := secrets[ref.SecretKeyRef.Name]; ok {
				_, inData = s.Data[ref.SecretKeyRef.Key]
				_, inString = s.StringData[ref.SecretKeyRef.Key]
			}
			if !inData && !inString {
				t.Errorf("env %s: no key %q in Secret %q", e.Name, ref.SecretKeyRef.Key, ref.SecretKeyRef.Name)
			}
			env[e.Name] = "from a secret"
		}
	}

	// The file: CQLGUARD_CONFIG names it inside the ConfigMap's mount.
	file := env["CQLGUARD_CONFIG"]
	var cm *corev1.ConfigMap
	for _, m := range c.VolumeMounts {
		if m.MountPath != path.Dir(file) {
			continue
		}
		if m.SubPath != "" {
			t.Errorf("volume %s: a subPath mount never sees the ConfigMap change", m.Name)
		}
		for _, v := range spec.Volumes {
			if v.Name == m.Name && v.ConfigMap != nil {
				cm = cms[v.ConfigMap.Name]
			}
		}
	}
	if cm == nil || cm.Data[path.Base(file)] == "" {
		t.Fatalf("CQLGUARD_CONFIG %q is not a key of a mounted ConfigMap", file)
	}
	data := []byte(cm.Data[path.Base(file)])
	cfg, err := config.Decode(file, data)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{cfg.Schema.PasswordEnv, cfg.Admin.TokenEnv, cfg.Coordination.PasswordEnv} {
		if _, ok := env[name]; name != "" && !ok {
			t.Errorf("the configuration reads %s, which the container's environment does not set", name)
		}
	}
	for name, dst := range map[string]*string{
		"CQLGUARD_LISTEN":       &cfg.Listen,
		"CQLGUARD_ADVERTISE":    &cfg.Advertise,
		"CQLGUARD_ADMIN_LISTEN": &cfg.Admin.Listen,
	} {
		if v := env[name]; v != "" {
			*dst = v
		}
	}
	if err := config.Check(&cfg, data); err != nil {
		t.Errorf("the configuration with the container's environment: %v", err)
	}

	// The admin port: probes, the declared port and Prometheus agree.
	_, adminPort, err := net.SplitHostPort(cfg.Admin.Listen)
	if err != nil {
		t.Fatalf("admin listen %q: %v", cfg.Admin.Listen, err)
	}
	if host, _, _ := net.SplitHostPort(cfg.Admin.Listen); host != "0.0.0.0" && host != "" {
		t.Errorf("admin listen %q: the kubelet probes the pod's address", cfg.Admin.Listen)
	}
	ports := map[string]string{}
	for _, p := range c.Ports {
		ports[p.Name] = fmt.Sprint(p.ContainerPort)
	}
	probes := map[string]*corev1.Probe{"startup": c.StartupProbe, "liveness": c.LivenessProbe, "readiness": c.ReadinessProbe}
	wantPath := map[string]string{"startup": "/healthz", "liveness": "/healthz", "readiness": "/readyz"}
	for kind, p := range probes {
		if p == nil || p.HTTPGet == nil {
			t.Errorf("%s probe: none over HTTP", kind)
			continue
		}
		port := p.HTTPGet.Port.String()
		if named, ok := ports[port]; ok {
			port = named
		}
		if port != adminPort || p.HTTPGet.Path != wantPath[kind] {
			t.Errorf("%s probe: %s on port %s, want %s on the admin port %s", kind, p.HTTPGet.Path, port, wantPath[kind], adminPort)
		}
	}
	ann := dep.Spec.Template.Annotations
	if ann["prometheus.io/scrape"] != "true" || ann["prometheus.io/port"] != adminPort || ann["prometheus.io/path"] != "/metrics" {
		t.Errorf("prometheus annotations %v, want scrape true, port %s, path /metrics", ann, adminPort)
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Error("cqlguard needs a CPU request and a memory limit")
	}
}

// TestDecodeStrictRefuses shows that the check catches what kubectl apply
// with strict validation would refuse, and a configuration cqlguard would.
func TestDecodeStrictRefuses(t *testing.T) {
	t.Parallel()
	deployment := func(spec string) string {
		return "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec:\n" + spec
	}
	configMap := func(file string) string {
		return "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata:\n  cqlguard.yaml: |\n" + file
	}
	for _, tc := range []struct {
		name, doc, want string
	}{
		{"misspelled field", deployment("  replica: 3\n"), `unknown field "spec.replica"`},
		{"field in the wrong case", deployment("  Replicas: 3\n"), `unknown field "spec.Replicas"`},
		{"misspelled nested field", deployment("  template:\n    spec:\n      containers:\n        - name: a\n          imagePullPolicyy: Always\n"), `unknown field "spec.template.spec.containers[0].imagePullPolicyy"`},
		{"duplicate key", deployment("  replicas: 3\n  replicas: 4\n"), `"replicas" already set`},
		{"value of the wrong type", deployment("  replicas: three\n"), "cannot unmarshal string"},
		{"unknown kind", "apiVersion: v1\nkind: Sevrice\nmetadata: {name: x}\n", `kind "Sevrice"`},
		{"misspelled secret field", "apiVersion: v1\nkind: Secret\nmetadata: {name: x}\nstringdata: {a: b}\n", `unknown field "stringdata"`},
		{"misspelled kustomization field", "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresource: [a.yaml]\n", `unknown field "resource"`},
		{"unknown key in cqlguard.yaml", configMap("    upstream: [10.0.0.1:9042]\n"), `unknown key "upstream"`},
		{"invalid cqlguard.yaml", configMap("    mode: sharded\n"), `mode: "sharded"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := checkDocument(tc.name, []byte(tc.doc))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got error %v, want one with %q", err, tc.want)
			}
		})
	}
}

func TestSplitDocuments(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want int
	}{
		{"a: 1\n", 1},
		{"# only a comment\n---\na: 1\n---\n\n---\nb: 2\n", 2},
		{"---\na: 1\n--- \nb: 2", 2},
		{"a: '---'\nb: |\n  --- not a separator\n", 1},
	} {
		if got := len(splitDocuments([]byte(tc.in))); got != tc.want {
			t.Errorf("splitDocuments(%q): %d documents, want %d", tc.in, got, tc.want)
		}
	}
}
