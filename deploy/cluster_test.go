package deploy

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	natsserver "github.com/nats-io/nats-server/v2/server"
)

// composeVar matches a compose interpolation with a default: ${NAME:-default}.
var composeVar = regexp.MustCompile(`^\$\{([A-Z_][A-Z0-9_]*):-([^}]*)\}$`)

// composeDefault returns the value compose uses when the variable is unset:
// the default of "${NAME:-default}", else v itself.
func composeDefault(v string) string {
	if m := composeVar.FindStringSubmatch(v); m != nil {
		return m[2]
	}
	return v
}

// natsOptions parses a nats-server command line with nats-server's own
// flags.
func natsOptions(t *testing.T, where string, cmdline []string) *natsserver.Options {
	t.Helper()
	if len(cmdline) == 0 || cmdline[0] != "nats-server" {
		t.Fatalf("%s: command %q, want nats-server ...", where, cmdline)
	}
	fs := flag.NewFlagSet("nats-server", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	noop := func() {}
	opts, err := natsserver.ConfigureOptions(fs, withRenderedAuth(t, where, cmdline[1:]), noop, noop, noop)
	if err != nil {
		t.Fatalf("%s: nats-server %q: %v", where, cmdline[1:], err)
	}
	return opts
}

// checkClusterNode checks a clustered JetStream node: cluster "parley" on
// port 6222, routes to exactly the hosts want (port 6222), a server name.
func checkClusterNode(t *testing.T, where string, opts *natsserver.Options, wantRoutes []string) {
	t.Helper()
	if opts.ServerName == "" {
		t.Errorf("%s: no --name (JetStream clustering needs unique server names)", where)
	}
	if opts.Cluster.Name != "parley" || opts.Cluster.Port != 6222 {
		t.Errorf("%s: cluster %q on port %d, want parley on 6222", where, opts.Cluster.Name, opts.Cluster.Port)
	}
	var routes []string
	for _, u := range opts.Routes {
		if u.Port() != "6222" {
			t.Errorf("%s: route %s, want port 6222", where, u)
		}
		routes = append(routes, u.Hostname())
	}
	slices.Sort(routes)
	if !slices.Equal(routes, wantRoutes) {
		t.Errorf("%s: routes to %v, want %v", where, routes, wantRoutes)
	}
	if !opts.JetStream || opts.StoreDir != "/data" || opts.HTTPPort != 8222 {
		t.Errorf("%s: JetStream %v, store dir %q, monitoring port %d; want true, /data, 8222",
			where, opts.JetStream, opts.StoreDir, opts.HTTPPort)
	}
}

// readEnvFile reads KEY=VALUE lines (comments and blank lines skipped).
func readEnvFile(t *testing.T, file string) map[string]string {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	env := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Errorf("%s: %q is not KEY=VALUE", file, line)
			continue
		}
		env[k] = v
	}
	return env
}

// TestComposeCluster checks docker-compose.yml's "cluster" profile and
// deploy/compose-cluster.env: three routed JetStream nodes, and workers
// pointed at all three with replicas 3 when the env file is used (and at
// the single server otherwise).
func TestComposeCluster(t *testing.T) {
	c := parley(t)
	docs := readDocs(t, "../docker-compose.yml")
	raw, _ := docs[0].(map[string]any)["services"].(map[string]any)
	nodes := []string{"nats-1", "nats-2", "nats-3"}
	names := map[string]bool{}
	for _, name := range nodes {
		svc, ok := raw[name].(map[string]any)
		if !ok {
			t.Errorf("compose: no %s service", name)
			continue
		}
		s := as[composeService](t, svc)
		where := "compose " + name
		if p := as[[]string](t, svc["profiles"]); !slices.Equal(p, []string{"cluster"}) {
			t.Errorf("%s: profiles %v, want [cluster]", where, p)
		}
		checkNATSImage(t, where, s.Image)
		opts := natsOptions(t, where, s.Command)
		checkClusterNode(t, where, opts, nodes)
		checkComposeMonitoring(t, where, s, opts)
		if opts.ServerName != name || names[opts.ServerName] {
			t.Errorf("%s: server name %q, want %q (unique)", where, opts.ServerName, name)
		}
		names[opts.ServerName] = true
		if hc := strings.Join(s.Healthcheck.Test, " "); !strings.Contains(hc, ":8222/healthz") {
			t.Errorf("%s: health check %q, want /healthz on 8222", where, hc)
		}
		if !slices.ContainsFunc(s.Volumes, func(v string) bool { return strings.HasSuffix(v, ":/data") }) {
			t.Errorf("%s: no volume on /data: %v", where, s.Volumes)
		}
	}

	env := readEnvFile(t, "compose-cluster.env")
	if env["COMPOSE_PROFILES"] != "cluster" || env["PARLEY_REPLICAS"] != "3" {
		t.Errorf("compose-cluster.env: COMPOSE_PROFILES=%q PARLEY_REPLICAS=%q, want cluster and 3",
			env["COMPOSE_PROFILES"], env["PARLEY_REPLICAS"])
	}
	var hosts []string
	for _, u := range strings.Split(env["PARLEY_NATS"], ",") {
		host, port, _ := strings.Cut(strings.TrimPrefix(u, "nats://"), ":")
		if port != "4222" {
			t.Errorf("compose-cluster.env: PARLEY_NATS URL %q, want port 4222", u)
		}
		hosts = append(hosts, host)
	}
	slices.Sort(hosts)
	if !slices.Equal(hosts, nodes) {
		t.Errorf("compose-cluster.env: PARLEY_NATS names %v, want %v", hosts, nodes)
	}
	for _, role := range workerRoles {
		svc, _ := raw[role].(map[string]any)
		s := as[composeService](t, svc)
		where := "compose " + role
		for k, def := range map[string]string{"PARLEY_NATS": "nats://nats:4222", "PARLEY_REPLICAS": "1"} {
			m := composeVar.FindStringSubmatch(s.Environment[k])
			if m == nil || m[1] != k || m[2] != def {
				t.Errorf("%s: %s = %q, want ${%s:-%s} (the env file switches it)", where, k, s.Environment[k], k, def)
			}
		}
		for k := range env {
			if strings.HasPrefix(k, "PARLEY_") && !c.env[role][k] {
				t.Errorf("compose-cluster.env sets %s, which parley %s does not read", k, role)
			}
		}
		deps, _ := svc["depends_on"].(map[string]any)
		for _, n := range nodes {
			d, _ := deps[n].(map[string]any)
			if d == nil || d["condition"] != "service_healthy" || d["required"] != false {
				t.Errorf("%s: depends_on %s = %v, want service_healthy, required: false", where, n, d)
			}
		}
	}
}

// TestClusterOverlay checks overlays/cluster without kustomize: base's NATS
// StatefulSet patched into a 3-node cluster (Parallel start, stable names,
// routes over the headless Service), a disruption budget of one node, and
// parley-config with replicas 3.
func TestClusterOverlay(t *testing.T) {
	dir := "overlays/cluster"
	k := as[kustomization](t, readDocs(t, filepath.Join(dir, "kustomization.yaml"))[0])
	for _, want := range []string{"../../base", "nats-pdb.yaml"} {
		if !slices.Contains(k.Resources, want) {
			t.Errorf("%s: resources %v lack %s", dir, k.Resources, want)
		}
	}
	var literals []string
	for _, g := range k.ConfigMapGenerator {
		if g.Name == "parley-config" {
			literals = g.Literals
		}
	}
	if !slices.Contains(literals, "PARLEY_REPLICAS=3") {
		t.Errorf("%s: parley-config %v, want PARLEY_REPLICAS=3", dir, literals)
	}

	patch := as[struct {
		Object `yaml:",inline"`
		Spec   struct {
			Replicas            int    `yaml:"replicas"`
			PodManagementPolicy string `yaml:"podManagementPolicy"`
			Template            struct {
				Spec struct {
					Containers []struct {
						Name string   `yaml:"name"`
						Args []string `yaml:"args"`
						Env  []struct {
							Name      string `yaml:"name"`
							ValueFrom struct {
								FieldRef struct {
									FieldPath string `yaml:"fieldPath"`
								} `yaml:"fieldRef"`
							} `yaml:"valueFrom"`
						} `yaml:"env"`
						Ports []struct {
							Name          string `yaml:"name"`
							ContainerPort int    `yaml:"containerPort"`
						} `yaml:"ports"`
					} `yaml:"containers"`
				} `yaml:"spec"`
			} `yaml:"template"`
		} `yaml:"spec"`
	}](t, readDocs(t, filepath.Join(dir, "nats-cluster.yaml"))[0])
	if patch.Kind != "StatefulSet" || patch.Metadata.Name != "nats" {
		t.Fatalf("nats-cluster.yaml patches %s %s, want StatefulSet nats", patch.Kind, patch.Metadata.Name)
	}
	if patch.Spec.Replicas != 3 || patch.Spec.PodManagementPolicy != "Parallel" {
		t.Errorf("nats-cluster.yaml: replicas %d, podManagementPolicy %q; want 3 and Parallel",
			patch.Spec.Replicas, patch.Spec.PodManagementPolicy)
	}
	base := rawManifests(t, "base")
	if len(base.statefulSets) != 1 {
		t.Fatal("base: want one StatefulSet")
	}
	baseC := base.statefulSets[0].Spec.Template.Spec.Containers[0]
	cs := patch.Spec.Template.Spec.Containers
	if len(cs) != 1 || cs[0].Name != baseC.Name {
		t.Fatalf("nats-cluster.yaml: containers %v, want the base container %q", cs, baseC.Name)
	}
	var wantRoutes []string
	for i := range patch.Spec.Replicas {
		wantRoutes = append(wantRoutes, fmt.Sprintf("nats-%d.%s", i, "nats-headless"))
	}
	opts := natsOptions(t, "overlays/cluster nats", append(slices.Clone(baseC.Command), cs[0].Args...))
	checkClusterNode(t, "overlays/cluster nats", opts, wantRoutes)
	if opts.ServerName != "$(POD_NAME)" {
		t.Errorf("overlays/cluster nats: --name %q, want $(POD_NAME)", opts.ServerName)
	}
	podName := false
	for _, e := range cs[0].Env {
		podName = podName || (e.Name == "POD_NAME" && e.ValueFrom.FieldRef.FieldPath == "metadata.name")
	}
	if !podName {
		t.Error("overlays/cluster nats: no POD_NAME from metadata.name for --name $(POD_NAME)")
	}
	ports := map[string]int{}
	for _, p := range cs[0].Ports {
		ports[p.Name] = p.ContainerPort
	}
	if ports["cluster"] != 6222 || ports["client"] != 4222 || ports["monitor"] != 8222 {
		t.Errorf("overlays/cluster nats: ports %v, want client 4222, cluster 6222, monitor 8222", ports)
	}

	svc := as[struct {
		Object `yaml:",inline"`
		Spec   struct {
			Ports []struct {
				Name string `yaml:"name"`
				Port int    `yaml:"port"`
			} `yaml:"ports"`
		} `yaml:"spec"`
	}](t, readDocs(t, filepath.Join(dir, "nats-headless.yaml"))[0])
	if svc.Kind != "Service" || svc.Metadata.Name != "nats-headless" ||
		!slices.ContainsFunc(svc.Spec.Ports, func(p struct {
			Name string `yaml:"name"`
			Port int    `yaml:"port"`
		}) bool {
			return p.Name == "cluster" && p.Port == 6222
		}) {
		t.Errorf("nats-headless.yaml: %s %s ports %v, want Service nats-headless with cluster 6222", svc.Kind, svc.Metadata.Name, svc.Spec.Ports)
	}

	m := rawManifests(t, dir)
	found := false
	for _, p := range m.pdbs {
		sel := p.Spec.Selector.MatchLabels
		found = found || (p.Metadata.Name == "nats" && sel["app.kubernetes.io/name"] == "nats" && sel["app.kubernetes.io/component"] == "nats")
	}
	if !found {
		t.Errorf("%s: no PodDisruptionBudget nats selecting the NATS pods", dir)
	}
}

// TestClusterOverlayBuild builds overlays/cluster (when kustomize or
// kubectl is present) and checks the result: a 3-node NATS StatefulSet in
// namespace parley and replicas 3 for parley.
func TestClusterOverlayBuild(t *testing.T) {
	kz := kustomize(t)
	out, err := exec.Command(kz[0], append(kz[1:], "overlays/cluster")...).Output()
	if err != nil {
		t.Fatalf("%s overlays/cluster: %v", strings.Join(kz, " "), err)
	}
	m := collect(t, "overlays/cluster (built)", decodeDocs(t, "overlays/cluster", out))
	if len(m.statefulSets) != 1 || m.statefulSets[0].Spec.Replicas == nil || *m.statefulSets[0].Spec.Replicas != 3 {
		t.Errorf("built overlays/cluster: want one StatefulSet with 3 replicas, have %d", len(m.statefulSets))
	}
	for name, data := range m.configMaps {
		if configMapName(name) == "parley-config" && data["PARLEY_REPLICAS"] != "3" {
			t.Errorf("built parley-config PARLEY_REPLICAS = %q, want 3", data["PARLEY_REPLICAS"])
		}
	}
	for _, o := range m.objects {
		if o.Kind != "Namespace" && o.Metadata.Namespace != "parley" {
			t.Errorf("%s %s in namespace %q, want parley", o.Kind, o.Metadata.Name, o.Metadata.Namespace)
		}
	}
}

// TestHelmValues checks deploy/nats/values.yaml, the official chart's
// values for the cluster overlays/prod expects: 3 clustered nodes, JetStream
// on file storage with a volume per node, NATS 2.12 or later.
func TestHelmValues(t *testing.T) {
	v := as[struct {
		Config struct {
			Cluster struct {
				Enabled  bool `yaml:"enabled"`
				Replicas int  `yaml:"replicas"`
			} `yaml:"cluster"`
			JetStream struct {
				Enabled   bool `yaml:"enabled"`
				FileStore struct {
					Enabled bool `yaml:"enabled"`
					PVC     struct {
						Enabled bool   `yaml:"enabled"`
						Size    string `yaml:"size"`
					} `yaml:"pvc"`
				} `yaml:"fileStore"`
			} `yaml:"jetstream"`
		} `yaml:"config"`
		Container struct {
			Image struct {
				Tag string `yaml:"tag"`
			} `yaml:"image"`
		} `yaml:"container"`
	}](t, readDocs(t, "nats/values.yaml")[0])
	if !v.Config.Cluster.Enabled || v.Config.Cluster.Replicas < 3 || v.Config.Cluster.Replicas%2 == 0 {
		t.Errorf("values.yaml: cluster enabled %v, replicas %d; want enabled with an odd number ≥ 3",
			v.Config.Cluster.Enabled, v.Config.Cluster.Replicas)
	}
	js := v.Config.JetStream
	if !js.Enabled || !js.FileStore.Enabled || !js.FileStore.PVC.Enabled || js.FileStore.PVC.Size == "" {
		t.Errorf("values.yaml: jetstream %+v, want file storage on a PVC", js)
	}
	checkNATSImage(t, "values.yaml", "nats:"+v.Container.Image.Tag)
	prod, err := os.ReadFile("overlays/prod/kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(prod), "deploy/nats/values.yaml") {
		t.Error("overlays/prod/kustomization.yaml does not say how to install the cluster it expects (deploy/nats/values.yaml)")
	}
}
