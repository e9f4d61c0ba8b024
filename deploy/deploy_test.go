package deploy

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goccy/go-yaml"
	natsserver "github.com/nats-io/nats-server/v2/server"

	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/internal/natsauth"
	"github.com/parley-dev/parley/workers/gate"

	"github.com/parley-dev/parley/internal/testskip"
)

// workerRoles are the subcommands that run one worker; every container and
// compose service of the parley image runs exactly one of them.
var workerRoles = []string{"processor", "agent", "toolexec", "gate"}

var (
	parleyBin string // the binary under test
	buildErr  error  // why it could not be built
)

func TestMain(m *testing.M) {
	os.Exit(func() int {
		if p := os.Getenv("PARLEY_BIN"); p != "" {
			parleyBin = p
			return testskip.Run(m)
		}
		dir, err := os.MkdirTemp("", "parley-deploy-test")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		parleyBin = filepath.Join(dir, "parley")
		if out, err := exec.Command("go", "build", "-o", parleyBin, "../cmd/parley").CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build ../cmd/parley: %v\n%s", err, out)
		}
		return testskip.Run(m)
	}())
}

// cliInfo is what `parley --help` and `parley <role> --help` say.
type cliInfo struct {
	commands map[string]bool            // subcommands
	env      map[string]map[string]bool // role -> PARLEY_* variables it reads
}

var (
	cliOnce sync.Once
	cli     cliInfo
	cliErr  error
)

var (
	commandLine = regexp.MustCompile(`^  ([a-z][a-z0-9-]*)(\s|$)`)
	envName     = regexp.MustCompile(`\$(PARLEY_[A-Z0-9_]+)`)
)

func help(args ...string) (string, error) {
	out, err := exec.Command(parleyBin, append(args, "--help")...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("parley %s --help: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// parley returns the subcommands and variables of the binary under test.
func parley(t *testing.T) cliInfo {
	t.Helper()
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	cliOnce.Do(func() {
		top, err := help()
		if err != nil {
			cliErr = err
			return
		}
		cli = cliInfo{commands: map[string]bool{}, env: map[string]map[string]bool{}}
		_, cmds, ok := strings.Cut(top, "\nCommands:\n")
		if !ok {
			cliErr = fmt.Errorf("parley --help has no Commands section:\n%s", top)
			return
		}
		for line := range strings.SplitSeq(cmds, "\n") {
			if m := commandLine.FindStringSubmatch(line); m != nil {
				cli.commands[m[1]] = true
			}
		}
		for _, role := range append(slices.Clone(workerRoles), "gateway") {
			out, err := help(role)
			if err != nil {
				cliErr = err
				return
			}
			cli.env[role] = map[string]bool{}
			for _, m := range envName.FindAllStringSubmatch(out, -1) {
				cli.env[role][m[1]] = true
			}
		}
	})
	if cliErr != nil {
		t.Fatal(cliErr)
	}
	return cli
}

func TestCLI(t *testing.T) {
	c := parley(t)
	for _, want := range append([]string{"dev", "demo"}, workerRoles...) {
		if !c.commands[want] {
			t.Errorf("parley --help lists no %q command; commands: %v", want, mapKeys(c.commands))
		}
	}
	for _, role := range workerRoles {
		for _, v := range []string{"PARLEY_NATS", "PARLEY_STORAGE", "PARLEY_REPLICAS"} {
			if !c.env[role][v] {
				t.Errorf("parley %s --help does not mention $%s", role, v)
			}
		}
	}
}

// checkRole reports whether args name a worker role, and which.
func checkRole(t *testing.T, where string, args []string) string {
	t.Helper()
	c := parley(t)
	if len(args) == 0 {
		t.Errorf("%s: no command; want one of %v", where, workerRoles)
		return ""
	}
	if !c.commands[args[0]] {
		t.Errorf("%s: %q is not a parley command (have %v)", where, args[0], mapKeys(c.commands))
		return ""
	}
	if !slices.Contains(workerRoles, args[0]) {
		t.Errorf("%s: %q is not a worker role %v", where, args[0], workerRoles)
		return ""
	}
	return args[0]
}

// checkEnv checks that every PARLEY_* variable is a flag of role.
func checkEnv(t *testing.T, where, role string, names []string) {
	t.Helper()
	c := parley(t)
	for _, n := range names {
		if strings.HasPrefix(n, "PARLEY_") && !c.env[role][n] {
			t.Errorf("%s: parley %s does not read %s (it reads %v)", where, role, n, mapKeys(c.env[role]))
		}
	}
}

// ---- YAML ----

// readDocs decodes every document of a YAML file.
func readDocs(t *testing.T, file string) []any {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return decodeDocs(t, file, b)
}

func decodeDocs(t *testing.T, name string, b []byte) []any {
	t.Helper()
	var docs []any
	dec := yaml.NewDecoder(bytes.NewReader(b))
	for {
		var v any
		err := dec.Decode(&v)
		if errors.Is(err, io.EOF) {
			return docs
		}
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if v != nil {
			docs = append(docs, v)
		}
	}
}

// as converts a decoded document into a typed view of it.
func as[T any](t *testing.T, v any) T {
	t.Helper()
	var out T
	b, err := yaml.Marshal(v)
	if err == nil {
		err = yaml.Unmarshal(b, &out)
	}
	if err != nil {
		t.Fatalf("converting to %T: %v", out, err)
	}
	return out
}

func yamlFiles(t *testing.T) []string {
	t.Helper()
	files := []string{"../docker-compose.yml"}
	err := filepath.WalkDir(".", func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && (strings.HasSuffix(p, ".yaml") || strings.HasSuffix(p, ".yml")) {
			files = append(files, p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

func TestYAMLParses(t *testing.T) {
	files := yamlFiles(t)
	if len(files) < 10 {
		t.Fatalf("found only %v", files)
	}
	for _, f := range files {
		if docs := readDocs(t, f); len(docs) == 0 {
			t.Errorf("%s: no YAML documents", f)
		}
	}
}

// ---- Kubernetes objects ----

type Object struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Metadata   struct {
		Name      string            `yaml:"name"`
		Namespace string            `yaml:"namespace"`
		Labels    map[string]string `yaml:"labels"`
	} `yaml:"metadata"`
	Data map[string]string `yaml:"data"`
}

type container struct {
	Name    string   `yaml:"name"`
	Image   string   `yaml:"image"`
	Command []string `yaml:"command"`
	Args    []string `yaml:"args"`
	Env     []struct {
		Name  string `yaml:"name"`
		Value string `yaml:"value"`
	} `yaml:"env"`
	EnvFrom []struct {
		ConfigMapRef *struct {
			Name string `yaml:"name"`
		} `yaml:"configMapRef"`
		SecretRef any `yaml:"secretRef"`
	} `yaml:"envFrom"`
	LivenessProbe  *probe `yaml:"livenessProbe"`
	ReadinessProbe *probe `yaml:"readinessProbe"`
	StartupProbe   *probe `yaml:"startupProbe"`
	Ports          []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	} `yaml:"ports"`
	SecurityContext struct {
		AllowPrivilegeEscalation *bool `yaml:"allowPrivilegeEscalation"`
		ReadOnlyRootFilesystem   *bool `yaml:"readOnlyRootFilesystem"`
		Capabilities             struct {
			Drop []string `yaml:"drop"`
		} `yaml:"capabilities"`
	} `yaml:"securityContext"`
	Resources struct {
		Requests map[string]string `yaml:"requests"`
		Limits   map[string]string `yaml:"limits"`
	} `yaml:"resources"`
	VolumeMounts []struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
		ReadOnly  bool   `yaml:"readOnly"`
	} `yaml:"volumeMounts"`
}

type podSpec struct {
	TerminationGracePeriodSeconds *int `yaml:"terminationGracePeriodSeconds"`
	SecurityContext               struct {
		RunAsNonRoot *bool `yaml:"runAsNonRoot"`
		RunAsUser    *int  `yaml:"runAsUser"`
	} `yaml:"securityContext"`
	Containers []container `yaml:"containers"`
	Volumes    []struct {
		Name      string `yaml:"name"`
		ConfigMap *struct {
			Name string `yaml:"name"`
		} `yaml:"configMap"`
	} `yaml:"volumes"`
}

type workload struct {
	Object `yaml:",inline"`
	Spec   struct {
		Replicas *int `yaml:"replicas"`
		Selector struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		} `yaml:"selector"`
		Template struct {
			Metadata struct {
				Labels map[string]string `yaml:"labels"`
			} `yaml:"metadata"`
			Spec podSpec `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

type scaledObject struct {
	Object `yaml:",inline"`
	Spec   struct {
		ScaleTargetRef struct {
			Name string `yaml:"name"`
		} `yaml:"scaleTargetRef"`
		MinReplicaCount *int `yaml:"minReplicaCount"`
		MaxReplicaCount int  `yaml:"maxReplicaCount"`
		Fallback        *struct {
			FailureThreshold int `yaml:"failureThreshold"`
			Replicas         int `yaml:"replicas"`
		} `yaml:"fallback"`
		Triggers []struct {
			Type     string            `yaml:"type"`
			Metadata map[string]string `yaml:"metadata"`
		} `yaml:"triggers"`
	} `yaml:"spec"`
}

type pdb struct {
	Object `yaml:",inline"`
	Spec   struct {
		MinAvailable               any    `yaml:"minAvailable"`
		MaxUnavailable             any    `yaml:"maxUnavailable"`
		UnhealthyPodEvictionPolicy string `yaml:"unhealthyPodEvictionPolicy"`
		Selector                   struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		} `yaml:"selector"`
	} `yaml:"spec"`
}

// manifests is a set of Kubernetes objects, as files or as a build's output.
type manifests struct {
	name          string
	objects       []Object
	deployments   []workload
	statefulSets  []workload
	scaledObjects []scaledObject
	pdbs          []pdb
	configMaps    map[string]map[string]string // name -> data
}

func collect(t *testing.T, name string, docs []any) *manifests {
	t.Helper()
	m := &manifests{name: name, configMaps: map[string]map[string]string{}}
	for _, d := range docs {
		o := as[Object](t, d)
		if o.Kind == "" || o.APIVersion == "" {
			continue // not a Kubernetes object (kustomization, collector config)
		}
		m.objects = append(m.objects, o)
		switch o.Kind {
		case "Deployment":
			m.deployments = append(m.deployments, as[workload](t, d))
		case "StatefulSet":
			m.statefulSets = append(m.statefulSets, as[workload](t, d))
		case "ScaledObject":
			m.scaledObjects = append(m.scaledObjects, as[scaledObject](t, d))
		case "PodDisruptionBudget":
			m.pdbs = append(m.pdbs, as[pdb](t, d))
		case "ConfigMap":
			m.configMaps[o.Metadata.Name] = o.Data
		}
	}
	return m
}

// rawManifests reads the objects in the YAML files under dir.
func rawManifests(t *testing.T, dir string) *manifests {
	t.Helper()
	var docs []any
	files, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
	for _, f := range files {
		docs = append(docs, readDocs(t, f)...)
	}
	return collect(t, dir, docs)
}

// probe is a container probe (only HTTP GET ones are used).
type probe struct {
	HTTPGet *struct {
		Path string `yaml:"path"`
		Port any    `yaml:"port"`
	} `yaml:"httpGet"`
}

// checkProbes checks that a worker's probes point at the endpoints parley
// serves: /livez and /readyz on the port named health, which is the port
// of PARLEY_HEALTH_LISTEN in base's parley-config (:8081).
func checkProbes(t *testing.T, where string, c container) {
	t.Helper()
	healthPort := 0
	for _, p := range c.Ports {
		if p.Name == "health" {
			healthPort = p.ContainerPort
		}
	}
	if healthPort != 8081 {
		t.Errorf("%s: container port named health is %d, want 8081 (PARLEY_HEALTH_LISTEN=:8081)", where, healthPort)
	}
	for _, pr := range []struct {
		kind, path string
		p          *probe
	}{{"livenessProbe", "/livez", c.LivenessProbe}, {"readinessProbe", "/readyz", c.ReadinessProbe}} {
		if pr.p == nil || pr.p.HTTPGet == nil {
			t.Errorf("%s: no %s httpGet", where, pr.kind)
			continue
		}
		if pr.p.HTTPGet.Path != pr.path || (pr.p.HTTPGet.Port != "health" && pr.p.HTTPGet.Port != healthPort) {
			t.Errorf("%s: %s GET %v%s, want %s on the health port", where, pr.kind, pr.p.HTTPGet.Port, pr.p.HTTPGet.Path, pr.path)
		}
	}
}

// configMapName maps a generated ConfigMap's name (name-<hash>) back to name.
func configMapName(name string) string {
	if i := strings.LastIndexByte(name, '-'); i > 0 && len(name)-i-1 == 10 {
		return name[:i]
	}
	return name
}

// checkDeployments checks every parley Deployment; built says whether m is
// kustomize's output (generated names resolved, ConfigMaps present).
func checkDeployments(t *testing.T, m *manifests, built bool) map[string]workload {
	t.Helper()
	byRole := map[string]workload{}
	for _, d := range m.deployments {
		where := m.name + ": Deployment " + d.Metadata.Name
		ps := d.Spec.Template.Spec
		if len(ps.Containers) != 1 {
			t.Errorf("%s: %d containers, want 1", where, len(ps.Containers))
			continue
		}
		c := ps.Containers[0]
		if len(c.Command) != 0 {
			t.Errorf("%s: command %q overrides the image's entrypoint", where, c.Command)
		}
		role := checkRole(t, where, c.Args)
		if role == "" {
			continue
		}
		if len(c.Args) != 1 {
			t.Errorf("%s: args %q, want [%q] (settings belong in env)", where, c.Args, role)
		}
		if _, dup := byRole[role]; dup {
			t.Errorf("%s: a second Deployment runs %s", where, role)
		}
		byRole[role] = d
		if want := "parley-" + role; d.Metadata.Name != want {
			t.Errorf("%s: runs %s, want it named %s", where, role, want)
		}
		if got := d.Spec.Template.Metadata.Labels["app.kubernetes.io/component"]; got != role {
			t.Errorf("%s: pod label app.kubernetes.io/component = %q, want %q", where, got, role)
		}
		for k, v := range d.Spec.Selector.MatchLabels {
			if d.Spec.Template.Metadata.Labels[k] != v {
				t.Errorf("%s: selector %s=%s does not match the pod labels", where, k, v)
			}
		}
		if !strings.Contains(c.Image, "parley") {
			t.Errorf("%s: image %q", where, c.Image)
		}
		checkProbes(t, where, c)
		if g := ps.TerminationGracePeriodSeconds; g == nil || *g < 40 {
			t.Errorf("%s: terminationGracePeriodSeconds %v, want >= 40 (30s drain + shutdown)", where, g)
		}
		if sc := ps.SecurityContext; sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
			t.Errorf("%s: pod securityContext.runAsNonRoot is not true", where)
		}
		sc := c.SecurityContext
		if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			t.Errorf("%s: readOnlyRootFilesystem is not true", where)
		}
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			t.Errorf("%s: allowPrivilegeEscalation is not false", where)
		}
		if !slices.Contains(sc.Capabilities.Drop, "ALL") {
			t.Errorf("%s: capabilities.drop %v lacks ALL", where, sc.Capabilities.Drop)
		}
		if c.Resources.Requests["cpu"] == "" || c.Resources.Requests["memory"] == "" || c.Resources.Limits["memory"] == "" {
			t.Errorf("%s: resources %+v, want cpu and memory requests and a memory limit", where, c.Resources)
		}

		var names []string
		env := map[string]string{}
		for _, e := range c.Env {
			names = append(names, e.Name)
			env[e.Name] = e.Value
		}
		if env["OTEL_SERVICE_NAME"] != "parley-"+role {
			t.Errorf("%s: OTEL_SERVICE_NAME = %q, want parley-%s", where, env["OTEL_SERVICE_NAME"], role)
		}
		hasConfig := false
		for _, ef := range c.EnvFrom {
			if ef.SecretRef != nil {
				t.Errorf("%s: envFrom a Secret; base and overlays keep no secrets", where)
			}
			if ef.ConfigMapRef == nil {
				continue
			}
			cm := ef.ConfigMapRef.Name
			if configMapName(cm) == "parley-config" {
				hasConfig = true
			}
			if built {
				data, ok := m.configMaps[cm]
				if !ok {
					t.Errorf("%s: envFrom ConfigMap %s, which the build does not contain", where, cm)
				}
				checkEnv(t, where+" (ConfigMap "+cm+")", role, mapKeys(data))
			}
		}
		if !hasConfig {
			t.Errorf("%s: no envFrom the parley-config ConfigMap", where)
		}
		checkEnv(t, where, role, names)

		if role == "gate" {
			checkGateMount(t, m, where, ps, env["PARLEY_GATE_CONFIG"], built)
		}
	}
	return byRole
}

// checkGateMount checks that PARLEY_GATE_CONFIG names a file mounted from a
// ConfigMap, and (built) that the file is a valid gating configuration.
func checkGateMount(t *testing.T, m *manifests, where string, ps podSpec, file string, built bool) {
	t.Helper()
	if file == "" {
		t.Errorf("%s: PARLEY_GATE_CONFIG is not set", where)
		return
	}
	c := ps.Containers[0]
	for _, vm := range c.VolumeMounts {
		if path.Dir(file) != vm.MountPath {
			continue
		}
		if !vm.ReadOnly {
			t.Errorf("%s: %s is mounted read-write", where, vm.MountPath)
		}
		for _, v := range ps.Volumes {
			if v.Name != vm.Name || v.ConfigMap == nil {
				continue
			}
			if !built {
				return
			}
			data, ok := m.configMaps[v.ConfigMap.Name][path.Base(file)]
			if !ok {
				t.Errorf("%s: ConfigMap %s has no key %s", where, v.ConfigMap.Name, path.Base(file))
				return
			}
			if _, err := gate.ParseConfig([]byte(data)); err != nil {
				t.Errorf("%s: %s: %v", where, file, err)
			}
			return
		}
	}
	t.Errorf("%s: PARLEY_GATE_CONFIG=%s is not in a ConfigMap volume mount", where, file)
}

// checkPDBs checks that every worker role has exactly one budget selecting
// its pods, and that the budget lets a drain proceed: maxUnavailable of at
// least 1, or a minAvailable below the role's replicas (a budget of
// minAvailable 1 on a single replica blocks every node drain).
func checkPDBs(t *testing.T, m *manifests, byRole map[string]workload) {
	t.Helper()
	for _, role := range workerRoles {
		d, ok := byRole[role]
		if !ok {
			continue
		}
		var budgets []pdb
		for _, p := range m.pdbs {
			sel := p.Spec.Selector.MatchLabels
			matches := len(sel) > 0
			for k, v := range sel {
				matches = matches && d.Spec.Template.Metadata.Labels[k] == v
			}
			if matches {
				budgets = append(budgets, p)
			}
		}
		if len(budgets) != 1 {
			t.Errorf("%s: %d PodDisruptionBudgets select the %s pods, want 1", m.name, len(budgets), role)
			continue
		}
		p := budgets[0]
		where := m.name + ": PodDisruptionBudget " + p.Metadata.Name
		replicas := 1
		if d.Spec.Replicas != nil {
			replicas = *d.Spec.Replicas
		}
		switch {
		case p.Spec.MaxUnavailable != nil && p.Spec.MinAvailable != nil:
			t.Errorf("%s: sets both minAvailable and maxUnavailable", where)
		case p.Spec.MaxUnavailable != nil:
			if n, ok := p.Spec.MaxUnavailable.(uint64); !ok || n < 1 {
				t.Errorf("%s: maxUnavailable %v, want an integer >= 1", where, p.Spec.MaxUnavailable)
			}
		case p.Spec.MinAvailable != nil:
			if n, ok := p.Spec.MinAvailable.(uint64); !ok || int(n) >= replicas {
				t.Errorf("%s: minAvailable %v with %d replicas blocks every drain", where, p.Spec.MinAvailable, replicas)
			}
		default:
			t.Errorf("%s: neither minAvailable nor maxUnavailable", where)
		}
		if p.Spec.UnhealthyPodEvictionPolicy != "AlwaysAllow" {
			t.Errorf("%s: unhealthyPodEvictionPolicy %q, want AlwaysAllow (a crash-looping pod must not block drains)", where, p.Spec.UnhealthyPodEvictionPolicy)
		}
	}
}

// consumers reads the durable consumers each role declares in its source:
// composite literals with Stream: events.StreamX and Durable: "name".
func consumers(t *testing.T) map[string][][2]string {
	t.Helper()
	streams := map[string]string{
		"StreamChat": events.StreamChat, "StreamInput": events.StreamInput, "StreamAgent": events.StreamAgent,
		"StreamRuns": events.StreamRuns, "StreamTools": events.StreamTools,
		"StreamDeadLetter": events.StreamDeadLetter,
	}
	out := map[string][][2]string{}
	for _, role := range workerRoles {
		fset := token.NewFileSet()
		files, _ := filepath.Glob(filepath.Join("..", "workers", role, "*.go"))
		var parsed []*ast.File
		consts := map[string]string{} // the package's string constants (Durable: InputDurable)
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			file, err := parser.ParseFile(fset, f, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			parsed = append(parsed, file)
			ast.Inspect(file, func(n ast.Node) bool {
				if vs, ok := n.(*ast.ValueSpec); ok {
					for i, name := range vs.Names {
						if i < len(vs.Values) {
							if bl, ok := vs.Values[i].(*ast.BasicLit); ok && bl.Kind == token.STRING {
								consts[name.Name], _ = strconv.Unquote(bl.Value)
							}
						}
					}
				}
				return true
			})
		}
		for _, file := range parsed {
			ast.Inspect(file, func(n ast.Node) bool {
				lit, ok := n.(*ast.CompositeLit)
				if !ok {
					return true
				}
				var stream, durable string
				for _, e := range lit.Elts {
					kv, ok := e.(*ast.KeyValueExpr)
					if !ok {
						continue
					}
					key, _ := kv.Key.(*ast.Ident)
					if key == nil {
						continue
					}
					switch key.Name {
					case "Stream":
						if sel, ok := kv.Value.(*ast.SelectorExpr); ok {
							stream = streams[sel.Sel.Name]
						}
					case "Durable":
						if bl, ok := kv.Value.(*ast.BasicLit); ok && bl.Kind == token.STRING {
							durable, _ = strconv.Unquote(bl.Value)
						} else if id, ok := kv.Value.(*ast.Ident); ok {
							durable = consts[id.Name]
						}
					}
				}
				if stream != "" && durable != "" {
					out[role] = append(out[role], [2]string{stream, durable})
				}
				return true
			})
		}
	}
	for _, role := range []string{"processor", "agent", "toolexec"} {
		if len(out[role]) == 0 {
			t.Fatalf("found no durable consumer in workers/%s; the source scan is out of date", role)
		}
	}
	return out
}

// checkScaledObjects checks that each KEDA ScaledObject targets a parley
// Deployment and watches exactly the consumers that role declares.
func checkScaledObjects(t *testing.T, m *manifests, byRole map[string]workload) {
	t.Helper()
	want := consumers(t)
	scaled := map[string]bool{}
	for _, so := range m.scaledObjects {
		where := m.name + ": ScaledObject " + so.Metadata.Name
		role := ""
		for r, d := range byRole {
			if d.Metadata.Name == so.Spec.ScaleTargetRef.Name {
				role = r
			}
		}
		if role == "" {
			t.Errorf("%s: targets %q, which is no parley Deployment here", where, so.Spec.ScaleTargetRef.Name)
			continue
		}
		scaled[role] = true
		if mn := so.Spec.MinReplicaCount; mn == nil || *mn < 1 || so.Spec.MaxReplicaCount < *mn {
			t.Errorf("%s: replicas min %v max %d, want 1 <= min <= max", where, mn, so.Spec.MaxReplicaCount)
		} else if fb := so.Spec.Fallback; fb == nil || fb.FailureThreshold < 1 || fb.Replicas < *mn {
			t.Errorf("%s: fallback %+v, want one that holds at least minReplicaCount (%d) when lag cannot be read", where, fb, *mn)
		}
		var got [][2]string
		for _, tr := range so.Spec.Triggers {
			md := tr.Metadata
			if tr.Type != "nats-jetstream" {
				t.Errorf("%s: trigger type %q, want nats-jetstream", where, tr.Type)
			}
			if md["account"] != "$G" {
				t.Errorf("%s: account %q, want $G", where, md["account"])
			}
			if u, err := url.Parse("http://" + md["natsServerMonitoringEndpoint"]); err != nil || u.Port() != "8222" {
				t.Errorf("%s: natsServerMonitoringEndpoint %q, want host:8222", where, md["natsServerMonitoringEndpoint"])
			}
			if n, err := strconv.Atoi(md["lagThreshold"]); err != nil || n < 1 {
				t.Errorf("%s: lagThreshold %q, want a positive integer", where, md["lagThreshold"])
			}
			got = append(got, [2]string{md["stream"], md["consumer"]})
		}
		slices.SortFunc(got, cmpPair)
		w := slices.Clone(want[role])
		slices.SortFunc(w, cmpPair)
		if !slices.Equal(got, w) {
			t.Errorf("%s: watches (stream, consumer) %v, but workers/%s consumes %v", where, got, role, w)
		}
	}
	if len(m.scaledObjects) > 0 {
		// Every role that declares a durable consumer scales on its lag.
		for _, role := range mapKeys(want) {
			if len(want[role]) > 0 && !scaled[role] {
				t.Errorf("%s: no ScaledObject for %s", m.name, role)
			}
		}
	}
}

func cmpPair(a, b [2]string) int { return strings.Compare(a[0]+"/"+a[1], b[0]+"/"+b[1]) }

// withRenderedAuth returns the nats-server arguments args with the
// configuration file (-c .../auth.conf: parley's authorization, as `parley
// auth init` renders it, mounted from a Secret) replaced by a freshly
// rendered one, so nats-server's own parser reads the shipped
// authorization. A command line without it is an error: clients would
// connect without authentication.
func withRenderedAuth(t *testing.T, where string, args []string) []string {
	t.Helper()
	args = slices.Clone(args)
	conf := slices.Index(args, "-c")
	if conf < 0 || conf == len(args)-1 {
		t.Errorf("%s: nats-server %q: no -c <auth.conf>: clients would connect without authentication", where, args)
		return args
	}
	dir := t.TempDir()
	if _, err := natsauth.Init(dir, natsauth.Roles()); err != nil {
		t.Fatal(err)
	}
	switch shipped, ok := shippedNATSConfigs[args[conf+1]]; {
	case ok:
		// A configuration of ours that includes auth.conf from its own
		// directory: parsed next to a freshly rendered one.
		data, err := os.ReadFile(shipped)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(data), "include "+natsauth.AuthFile) {
			t.Errorf("%s: %s does not include %s: clients would connect without authentication", where, shipped, natsauth.AuthFile)
		}
		args[conf+1] = filepath.Join(dir, filepath.Base(shipped))
		if err := os.WriteFile(args[conf+1], data, 0o644); err != nil {
			t.Fatal(err)
		}
	case filepath.Base(args[conf+1]) == natsauth.AuthFile:
		args[conf+1] = filepath.Join(dir, natsauth.AuthFile)
	default:
		t.Errorf("%s: nats-server -c %s, want the rendered %s or a shipped configuration including it", where, args[conf+1], natsauth.AuthFile)
	}
	return args
}

// shippedNATSConfigs maps where a nats-server configuration of deploy/ is
// mounted (TestCompose checks the mounts) to its file here.
var shippedNATSConfigs = map[string]string{"/etc/nats/parley.conf": "nats/compose.conf"}

// checkNATSArgs parses a NATS command line with nats-server's own flags
// (nil when it cannot).
func checkNATSArgs(t *testing.T, where string, cmdline []string) *natsserver.Options {
	t.Helper()
	if len(cmdline) == 0 || cmdline[0] != "nats-server" {
		t.Errorf("%s: command %q, want nats-server ...", where, cmdline)
		return nil
	}
	fs := flag.NewFlagSet("nats-server", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	noop := func() {}
	args := withRenderedAuth(t, where, cmdline[1:])
	opts, err := natsserver.ConfigureOptions(fs, args, noop, noop, noop)
	if err != nil {
		t.Errorf("%s: nats-server %q: %v", where, cmdline[1:], err)
		return nil
	}
	if len(opts.Nkeys) != len(natsauth.Roles()) {
		t.Errorf("%s: nats-server %q: %d nkey users, want parley's %d principals", where, cmdline[1:], len(opts.Nkeys), len(natsauth.Roles()))
	}
	if !opts.JetStream || opts.StoreDir != "/data" || opts.HTTPPort != 8222 {
		t.Errorf("%s: nats-server %q: JetStream %v, store dir %q, monitoring port %d; want true, /data, 8222",
			where, cmdline[1:], opts.JetStream, opts.StoreDir, opts.HTTPPort)
	}
	return opts
}

var natsImage = regexp.MustCompile(`^nats:2\.(\d+)(\.\d+)?-alpine`)

// checkNATSImage wants an alpine NATS image (it has a shell and wget for the
// compose health check) of 2.12 or later: parley needs 2.11 (per-key TTLs in
// KV buckets); what it ships runs 2.12, whose message schedules expire its
// pause records with 2 bus messages fewer per pause.
func checkNATSImage(t *testing.T, where, image string) {
	t.Helper()
	m := natsImage.FindStringSubmatch(image)
	if m == nil {
		t.Errorf("%s: image %q, want nats:2.X-alpine", where, image)
		return
	}
	if minor, _ := strconv.Atoi(m[1]); minor < 12 {
		t.Errorf("%s: image %q, want NATS 2.12 or later", where, image)
	}
}

// ---- kustomizations ----

type kustomization struct {
	Resources []string `yaml:"resources"`
	Patches   []struct {
		Path string `yaml:"path"`
	} `yaml:"patches"`
	ConfigMapGenerator []struct {
		Name     string   `yaml:"name"`
		Behavior string   `yaml:"behavior"`
		Literals []string `yaml:"literals"`
		Files    []string `yaml:"files"`
	} `yaml:"configMapGenerator"`
}

var kustomizeDirs = []string{"base", "overlays/dev", "overlays/prod", "overlays/cluster"}

func TestKustomizationFiles(t *testing.T) {
	c := parley(t)
	for _, dir := range kustomizeDirs {
		k := as[kustomization](t, readDocs(t, filepath.Join(dir, "kustomization.yaml"))[0])
		for _, r := range k.Resources {
			if _, err := os.Stat(filepath.Join(dir, r)); err != nil {
				t.Errorf("%s: resource %s: %v", dir, r, err)
			}
		}
		for _, p := range k.Patches {
			if p.Path == "" {
				continue
			}
			if _, err := os.Stat(filepath.Join(dir, p.Path)); err != nil {
				t.Errorf("%s: patch %s: %v", dir, p.Path, err)
			}
		}
		for _, g := range k.ConfigMapGenerator {
			for _, f := range g.Files {
				if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
					t.Errorf("%s: ConfigMap %s file %s: %v", dir, g.Name, f, err)
				}
			}
			if g.Name != "parley-config" {
				continue
			}
			// Every role reads parley-config, so each key is a flag of every role.
			for _, lit := range g.Literals {
				key, _, _ := strings.Cut(lit, "=")
				for _, role := range workerRoles {
					if !c.env[role][key] {
						t.Errorf("%s: parley-config sets %s, which parley %s does not read", dir, key, role)
					}
				}
			}
		}
	}
}

func TestGateConfig(t *testing.T) {
	b, err := os.ReadFile("base/gate.json")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := gate.ParseConfig(b)
	if err != nil {
		t.Fatal(err)
	}
	if a, ok := cfg.Agents["*"]; !ok || !a.RequireToolConfirmation || a.Tools["create_event"] != gate.ModeNever {
		t.Errorf("gate.json = %+v, want \"*\" confirming tools except create_event", cfg)
	}
}

func TestBaseManifests(t *testing.T) {
	m := rawManifests(t, "base")
	byRole := checkDeployments(t, m, false)
	for _, role := range workerRoles {
		if _, ok := byRole[role]; !ok {
			t.Errorf("base: no Deployment runs %s", role)
		}
	}
	checkPDBs(t, m, byRole)
	if len(m.statefulSets) != 1 || m.statefulSets[0].Metadata.Name != "nats" {
		t.Fatalf("base: want one StatefulSet nats, have %d", len(m.statefulSets))
	}
	c := m.statefulSets[0].Spec.Template.Spec.Containers[0]
	checkNATSImage(t, "base StatefulSet nats", c.Image)
	checkNATSArgs(t, "base StatefulSet nats", append(slices.Clone(c.Command), c.Args...))
}

func TestProdScaledObjects(t *testing.T) {
	// The Deployments are base's (checked by TestBaseManifests).
	byRole := map[string]workload{}
	for _, d := range rawManifests(t, "base").deployments {
		if c := d.Spec.Template.Spec.Containers; len(c) == 1 && len(c[0].Args) > 0 {
			byRole[c[0].Args[0]] = d
		}
	}
	prod := rawManifests(t, "overlays/prod")
	checkScaledObjects(t, prod, byRole)
	if len(prod.scaledObjects) == 0 {
		t.Error("overlays/prod: no ScaledObjects")
	}
}

// kustomize returns a command line that runs `kustomize build`, or skips.
func kustomize(t *testing.T) []string {
	t.Helper()
	if p, err := exec.LookPath("kustomize"); err == nil {
		return []string{p, "build"}
	}
	if p, err := exec.LookPath("kubectl"); err == nil {
		return []string{p, "kustomize"}
	}
	testskip.Skip(t, testskip.Kustomize, "neither kustomize nor kubectl is on PATH, so the overlays are not built")
	return nil
}

func TestKustomizeBuild(t *testing.T) {
	kz := kustomize(t)
	for _, dir := range kustomizeDirs {
		t.Run(dir, func(t *testing.T) {
			out, err := exec.Command(kz[0], append(kz[1:], dir)...).Output()
			if err != nil {
				var ee *exec.ExitError
				if errors.As(err, &ee) {
					t.Fatalf("%s %s: %v\n%s", strings.Join(kz, " "), dir, err, ee.Stderr)
				}
				t.Fatal(err)
			}
			m := collect(t, dir+" (built)", decodeDocs(t, dir, out))
			byRole := checkDeployments(t, m, true)
			for _, role := range workerRoles {
				if _, ok := byRole[role]; !ok {
					t.Errorf("no Deployment runs %s", role)
				}
			}
			checkPDBs(t, m, byRole)
			checkScaledObjects(t, m, byRole)

			var cfg map[string]string
			for name, data := range m.configMaps {
				if configMapName(name) == "parley-config" {
					cfg = data
				}
			}
			switch dir {
			case "overlays/prod":
				if len(m.statefulSets) != 0 {
					t.Errorf("prod still runs the single-node NATS StatefulSet")
				}
				for k, want := range map[string]string{
					"PARLEY_NATS": "nats://nats.nats.svc:4222", "PARLEY_REPLICAS": "3", "PARLEY_STORAGE": "file",
				} {
					if cfg[k] != want {
						t.Errorf("prod parley-config %s = %q, want %q", k, cfg[k], want)
					}
				}
				if len(m.scaledObjects) != 3 {
					t.Errorf("prod has %d ScaledObjects, want 3", len(m.scaledObjects))
				}
				for _, o := range m.objects {
					if o.Kind != "Namespace" && o.Metadata.Namespace != "parley" {
						t.Errorf("%s %s in namespace %q, want parley", o.Kind, o.Metadata.Name, o.Metadata.Namespace)
					}
				}
			default:
				// The in-cluster NATS must be what parley-config points at.
				u, err := url.Parse(cfg["PARLEY_NATS"])
				if err != nil || u.Port() != "4222" {
					t.Fatalf("parley-config PARLEY_NATS = %q", cfg["PARLEY_NATS"])
				}
				found := false
				for _, o := range m.objects {
					found = found || (o.Kind == "Service" && o.Metadata.Name == u.Hostname())
				}
				if !found {
					t.Errorf("PARLEY_NATS = %s, but there is no Service %s", cfg["PARLEY_NATS"], u.Hostname())
				}
				if len(m.statefulSets) != 1 {
					t.Errorf("%d StatefulSets, want the NATS one", len(m.statefulSets))
				}
			}
		})
	}
}

// ---- docker-compose.yml ----

// checkComposeMonitoring wants a compose NATS service's monitoring
// endpoint (/varz, /connz: connections, principals and subscriptions,
// without authentication) on the container's loopback only and
// published on no host port, and the shipped configuration that says so
// mounted where the command reads it.
func checkComposeMonitoring(t *testing.T, where string, s composeService, opts *natsserver.Options) {
	t.Helper()
	if opts != nil && (opts.HTTPHost != "127.0.0.1" || opts.HTTPPort != 8222) {
		t.Errorf("%s: monitoring on %s:%d, want 127.0.0.1:8222 (the container's loopback: it has no authentication)", where, opts.HTTPHost, opts.HTTPPort)
	}
	for _, p := range s.Ports {
		if strings.Contains(p, "8222") {
			t.Errorf("%s: publishes %q: the monitoring port has no authentication", where, p)
		}
	}
	for target, file := range shippedNATSConfigs {
		if slices.Contains(s.Command, target) && !slices.Contains(s.Volumes, "./deploy/"+file+":"+target+":ro") {
			t.Errorf("%s: reads %s, but does not mount ./deploy/%s there (read-only): %v", where, target, file, s.Volumes)
		}
	}
}

type composeService struct {
	Image   string   `yaml:"image"`
	Command []string `yaml:"command"`
	Build   *struct {
		Context    string `yaml:"context"`
		Dockerfile string `yaml:"dockerfile"`
	} `yaml:"build"`
	Environment map[string]string `yaml:"environment"`
	DependsOn   map[string]struct {
		Condition string `yaml:"condition"`
	} `yaml:"depends_on"`
	StopGracePeriod string   `yaml:"stop_grace_period"`
	Volumes         []string `yaml:"volumes"`
	Ports           []string `yaml:"ports"`
	Deploy          struct {
		Replicas *int `yaml:"replicas"`
	} `yaml:"deploy"`
	Healthcheck struct {
		Test []string `yaml:"test"`
	} `yaml:"healthcheck"`
	Secrets []struct {
		Source string `yaml:"source"`
		Target string `yaml:"target"`
	} `yaml:"secrets"`
}

func TestCompose(t *testing.T) {
	docs := readDocs(t, "../docker-compose.yml")
	raw, _ := docs[0].(map[string]any)["services"].(map[string]any)
	services := map[string]composeService{}
	for name, s := range raw {
		if _, ok := s.(map[string]any)["depends_on"].([]any); ok {
			// Short form (a list of names): no conditions to check.
			delete(s.(map[string]any), "depends_on")
		}
		services[name] = as[composeService](t, s)
	}

	// NATS with JetStream on a volume and a health check on /healthz.
	nats, ok := services["nats"]
	if !ok {
		t.Fatal("no nats service")
	}
	checkNATSImage(t, "compose nats", nats.Image)
	checkComposeMonitoring(t, "compose nats", nats, checkNATSArgs(t, "compose nats", nats.Command))
	if hc := strings.Join(nats.Healthcheck.Test, " "); !strings.Contains(hc, ":8222/healthz?js-enabled-only=true") {
		t.Errorf("compose nats: health check %q, want /healthz?js-enabled-only=true on 8222", hc)
	}

	// The collector forwards to Jaeger.
	col, ok := services["otel-collector"]
	if !ok {
		t.Fatal("no otel-collector service")
	}
	if !slices.ContainsFunc(col.Volumes, func(v string) bool { return strings.HasPrefix(v, "./deploy/otel-collector.yaml:") }) {
		t.Errorf("otel-collector does not mount ./deploy/otel-collector.yaml: %v", col.Volumes)
	}
	if _, ok := services["jaeger"]; !ok {
		t.Error("no jaeger service")
	}

	// The four roles from one image.
	image, builders := "", 0
	for _, role := range workerRoles {
		s, ok := services[role]
		where := "compose " + role
		if !ok {
			t.Errorf("no %s service", role)
			continue
		}
		if got := checkRole(t, where, s.Command); got != role {
			t.Errorf("%s: command %q, want [%q]", where, s.Command, role)
		}
		if image == "" {
			image = s.Image
		}
		if s.Image == "" || s.Image != image {
			t.Errorf("%s: image %q, want the shared %q", where, s.Image, image)
		}
		if s.Build != nil {
			builders++
			if _, err := os.Stat(filepath.Join("..", s.Build.Context, s.Build.Dockerfile)); err != nil {
				t.Errorf("%s: build: %v", where, err)
			}
		}
		checkEnv(t, where, role, mapKeys(s.Environment))
		for k, want := range map[string]string{
			"PARLEY_NATS":                 "nats://nats:4222",
			"OTEL_EXPORTER_OTLP_ENDPOINT": "http://otel-collector:4318",
			"OTEL_SERVICE_NAME":           "parley-" + role,
		} {
			if got := composeDefault(s.Environment[k]); got != want {
				t.Errorf("%s: %s = %q, want %q", where, k, s.Environment[k], want)
			}
		}
		if s.DependsOn["nats"].Condition != "service_healthy" {
			t.Errorf("%s: does not wait for nats to be healthy", where)
		}
		if d, err := time.ParseDuration(s.StopGracePeriod); err != nil || d < 30*time.Second {
			t.Errorf("%s: stop_grace_period %q, want >= 30s", where, s.StopGracePeriod)
		}
		wantReplicas := 1
		if role == "processor" || role == "agent" {
			wantReplicas = 2
		}
		if got := s.Deploy.Replicas; (got == nil && wantReplicas != 1) || (got != nil && *got != wantReplicas) {
			t.Errorf("%s: deploy.replicas %v, want %d", where, got, wantReplicas)
		}
		if file := s.Environment["PARLEY_GATE_CONFIG"]; file != "" {
			mounted := false
			for _, v := range s.Volumes {
				parts := strings.Split(v, ":")
				if len(parts) >= 2 && parts[1] == file {
					mounted = true
					b, err := os.ReadFile(filepath.Join("..", parts[0]))
					if err == nil {
						_, err = gate.ParseConfig(b)
					}
					if err != nil {
						t.Errorf("%s: %s: %v", where, parts[0], err)
					}
				}
			}
			if !mounted {
				t.Errorf("%s: PARLEY_GATE_CONFIG=%s is not mounted", where, file)
			}
		}
	}
	if builders != 1 {
		t.Errorf("%d role services build the image, want exactly 1 (two builds of one tag race)", builders)
	}
	fileSecrets := map[string]string{} // name -> file
	if top, ok := docs[0].(map[string]any)["secrets"].(map[string]any); ok {
		for name, v := range top {
			fileSecrets[name] = as[struct {
				File string `yaml:"file"`
			}](t, v).File
		}
	}
	checkComposeGateway(t, services, image, fileSecrets)
}

// checkComposeGateway checks compose's gateway service: the web chat of
// `docker compose up`. It runs `parley gateway` from the shared image as
// the principal gateway (its seed from auth init's directory), reads its
// tokens from a secret file, listens on the port compose publishes on
// the host's loopback, and starts after NATS is healthy and the processor
// started; the processor trusts the principal gateway to name its users.
func checkComposeGateway(t *testing.T, services map[string]composeService, image string, fileSecrets map[string]string) {
	t.Helper()
	s, ok := services["gateway"]
	if !ok {
		t.Error("no gateway service: docker compose up gives no web chat")
		return
	}
	const where = "compose gateway"
	if len(s.Command) != 1 || s.Command[0] != "gateway" || !parley(t).commands["gateway"] {
		t.Errorf("%s: command %q, want [gateway]", where, s.Command)
	}
	if s.Image != image || s.Build != nil {
		t.Errorf("%s: image %q (build %v), want the shared %q, not built", where, s.Image, s.Build != nil, image)
	}
	checkEnv(t, where, "gateway", mapKeys(s.Environment))
	for k, want := range map[string]string{
		"PARLEY_NATS":       "nats://nats:4222",
		"OTEL_SERVICE_NAME": "parley-gateway",
	} {
		if got := composeDefault(s.Environment[k]); got != want {
			t.Errorf("%s: %s = %q, want %q", where, k, s.Environment[k], want)
		}
	}
	// Its secrets: the principal's seed and the token file, each mounted
	// where the environment says, from the auth directory.
	mounted := map[string]string{} // /run/secrets/<target> -> host file
	for _, sec := range s.Secrets {
		mounted["/run/secrets/"+sec.Target] = fileSecrets[sec.Source]
	}
	for k, want := range map[string]string{
		"PARLEY_NATS_NKEY":          "./deploy/compose-auth/" + natsauth.SeedFile(natsauth.Gateway),
		"PARLEY_GATEWAY_TOKEN_FILE": "./deploy/compose-auth/gateway-tokens",
	} {
		if got := mounted[s.Environment[k]]; s.Environment[k] == "" || got != want {
			t.Errorf("%s: %s = %q mounts %q, want a secret from %s", where, k, s.Environment[k], got, want)
		}
	}
	// Listens on all of the container's interfaces, on the port compose
	// publishes on the host's loopback only.
	host, port, err := net.SplitHostPort(s.Environment["PARLEY_GATEWAY_LISTEN"])
	if err != nil || host != "0.0.0.0" {
		t.Errorf("%s: PARLEY_GATEWAY_LISTEN = %q, want 0.0.0.0:<port> (%v)", where, s.Environment["PARLEY_GATEWAY_LISTEN"], err)
	}
	if !slices.Contains(s.Ports, "127.0.0.1:"+port+":"+port) {
		t.Errorf("%s: ports %v, want 127.0.0.1:%s:%s (the host's loopback)", where, s.Ports, port, port)
	}
	if s.DependsOn["nats"].Condition != "service_healthy" || s.DependsOn["processor"].Condition == "" {
		t.Errorf("%s: depends_on %v, want nats healthy and the processor started (it creates the streams)", where, s.DependsOn)
	}
	if tp, ok := services["processor"].Environment["PARLEY_TRUSTED_PRINCIPALS"]; ok && !slices.Contains(strings.Split(tp, ","), natsauth.Gateway) {
		t.Errorf("compose processor: PARLEY_TRUSTED_PRINCIPALS = %q leaves out the gateway", tp)
	}
}

func TestCollectorConfig(t *testing.T) {
	type pipeline struct {
		Receivers  []string `yaml:"receivers"`
		Processors []string `yaml:"processors"`
		Exporters  []string `yaml:"exporters"`
	}
	cfg := as[struct {
		Receivers  map[string]any `yaml:"receivers"`
		Processors map[string]any `yaml:"processors"`
		Exporters  map[string]struct {
			Endpoint string `yaml:"endpoint"`
		} `yaml:"exporters"`
		Extensions map[string]any `yaml:"extensions"`
		Service    struct {
			Extensions []string            `yaml:"extensions"`
			Pipelines  map[string]pipeline `yaml:"pipelines"`
		} `yaml:"service"`
	}](t, readDocs(t, "otel-collector.yaml")[0])
	traces, ok := cfg.Service.Pipelines["traces"]
	if !ok {
		t.Fatal("no traces pipeline")
	}
	check := func(kind string, names []string, defined func(string) bool) {
		for _, n := range names {
			if !defined(n) {
				t.Errorf("%s %q is used but not defined", kind, n)
			}
		}
	}
	check("receiver", traces.Receivers, func(n string) bool { _, ok := cfg.Receivers[n]; return ok })
	check("processor", traces.Processors, func(n string) bool { _, ok := cfg.Processors[n]; return ok })
	check("exporter", traces.Exporters, func(n string) bool { _, ok := cfg.Exporters[n]; return ok })
	check("extension", cfg.Service.Extensions, func(n string) bool { _, ok := cfg.Extensions[n]; return ok })
	if e := cfg.Exporters["otlp/jaeger"].Endpoint; e != "jaeger:4317" {
		t.Errorf("otlp/jaeger endpoint %q, want jaeger:4317", e)
	}
}

// ---- Dockerfile ----

// TestDockerfile is in release_test.go.

// TestDockerignore checks that the build context keeps every file the build
// of ./cmd/parley reads: go.mod, go.sum, and the Go and embedded files of the
// module's packages it imports.
func TestDockerignore(t *testing.T) {
	b, err := os.ReadFile("../.dockerignore")
	if err != nil {
		t.Fatal(err)
	}
	var patterns []string
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line != "" && !strings.HasPrefix(line, "#") {
			patterns = append(patterns, strings.TrimPrefix(line, "/"))
		}
	}
	out, err := exec.Command("go", "list", "-deps",
		"-f", `{{if .Module}}{{if .Module.Main}}{{.Dir}}|{{join .GoFiles ","}}|{{join .EmbedFiles ","}}{{end}}{{end}}`,
		"../cmd/parley").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	need := []string{"go.mod", "go.sum"}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		parts := strings.Split(line, "|")
		rel, err := filepath.Rel(root, parts[0])
		if err != nil {
			t.Fatal(err)
		}
		for _, list := range parts[1:] {
			for _, f := range strings.Split(list, ",") {
				if f != "" {
					need = append(need, filepath.ToSlash(filepath.Join(rel, f)))
				}
			}
		}
	}
	if len(need) < 10 {
		t.Fatalf("go list found only %v", need)
	}
	for _, f := range need {
		if p := ignoredBy(patterns, f); p != "" {
			t.Errorf(".dockerignore pattern %q drops %s, which the build needs", p, f)
		}
	}
}

// ignoredBy returns the last pattern that decides to exclude file, or "".
// It follows Docker's rules closely enough for simple patterns: a pattern
// matches the file or any parent directory, "**/" matches any depth, and "!"
// re-includes.
func ignoredBy(patterns []string, file string) string {
	decided := ""
	for _, p := range patterns {
		neg := strings.HasPrefix(p, "!")
		pat := strings.TrimPrefix(p, "!")
		if matchesPath(pat, file) {
			if neg {
				decided = ""
			} else {
				decided = p
			}
		}
	}
	return decided
}

func matchesPath(pat, file string) bool {
	segs := strings.Split(file, "/")
	for i := 1; i <= len(segs); i++ {
		prefix := strings.Join(segs[:i], "/")
		if ok, _ := path.Match(pat, prefix); ok {
			return true
		}
		if rest, ok := strings.CutPrefix(pat, "**/"); ok {
			for j := 0; j < i; j++ {
				if ok, _ := path.Match(rest, strings.Join(segs[j:i], "/")); ok {
					return true
				}
			}
		}
	}
	return false
}

func mapKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
