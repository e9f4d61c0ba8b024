package deploy

import (
	"bytes"
	"context"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goccy/go-yaml"
)

// versionPkg is the package whose variables the release builds set with
// -ldflags -X.
const versionPkg = "github.com/parley-dev/parley/internal/version"

// goToolchain returns the Go version go.mod builds with: its toolchain
// line when present (go1.26.8 -> 1.26.8), else its go line.
func goToolchain(t *testing.T) string {
	t.Helper()
	gomod, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	if m := regexp.MustCompile(`(?m)^toolchain go(\S+)`).FindSubmatch(gomod); m != nil {
		return string(m[1])
	}
	m := regexp.MustCompile(`(?m)^go (\d+\.\d+\.\d+)\s*$`).FindSubmatch(gomod)
	if m == nil {
		t.Fatal("go.mod has no go line with a patch version (go 1.N.P) and no toolchain line")
	}
	return string(m[1])
}

// versionVars reads the package-level string variables of internal/version
// (the -X targets).
func versionVars(t *testing.T) map[string]bool {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "../internal/version/version.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	vars := map[string]bool{}
	for _, d := range f.Decls {
		if gd, ok := d.(*ast.GenDecl); ok && gd.Tok == token.VAR {
			for _, s := range gd.Specs {
				vs := s.(*ast.ValueSpec)
				if id, ok := vs.Type.(*ast.Ident); ok && id.Name == "string" {
					for _, n := range vs.Names {
						vars[n.Name] = true
					}
				}
			}
		}
	}
	return vars
}

// checkLinkFlags checks that every -X in ldflags sets an existing string
// variable of internal/version, and that Version and Commit are set.
func checkLinkFlags(t *testing.T, where, ldflags string) {
	t.Helper()
	vars := versionVars(t)
	set := map[string]bool{}
	for _, m := range regexp.MustCompile(`-X\s+([^=\s]+)=`).FindAllStringSubmatch(ldflags, -1) {
		pkg, name, _ := strings.Cut(m[1][strings.LastIndexByte(m[1], '/')+1:], ".")
		full := m[1][:strings.LastIndexByte(m[1], '/')+1] + pkg
		if full != versionPkg || !vars[name] {
			t.Errorf("%s: -X %s sets no string variable of %s (it has %v)", where, m[1], versionPkg, mapKeys(vars))
		}
		set[name] = true
	}
	for _, want := range []string{"Version", "Commit"} {
		if !set[want] {
			t.Errorf("%s: ldflags %q do not set %s.%s", where, ldflags, versionPkg, want)
		}
	}
}

// dockerInstruction is one instruction of a Dockerfile, continuation lines
// joined.
type dockerInstruction struct {
	cmd  string // upper case: FROM, RUN, ...
	args string
}

func parseDockerfile(t *testing.T, b []byte) [][]dockerInstruction {
	t.Helper()
	var stages [][]dockerInstruction
	var cur strings.Builder
	flush := func() {
		line := strings.TrimSpace(cur.String())
		cur.Reset()
		if line == "" {
			return
		}
		cmd, args, _ := strings.Cut(line, " ")
		in := dockerInstruction{strings.ToUpper(cmd), strings.TrimSpace(args)}
		if in.cmd == "FROM" {
			stages = append(stages, nil)
		}
		if len(stages) == 0 {
			if in.cmd != "ARG" {
				t.Fatalf("Dockerfile: %s before the first FROM", in.cmd)
			}
			return
		}
		stages[len(stages)-1] = append(stages[len(stages)-1], in)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "#") {
			continue
		}
		if rest, ok := strings.CutSuffix(trimmed, "\\"); ok {
			cur.WriteString(rest + " ")
			continue
		}
		cur.WriteString(trimmed)
		flush()
	}
	flush()
	return stages
}

// TestDockerfile checks the image build: the build stage runs go.mod's
// exact toolchain and builds ./cmd/parley static with the version set; the
// runtime stage is distroless, non-root (numeric), carries the OCI labels,
// and runs /parley with --help as the only default.
func TestDockerfile(t *testing.T) {
	b, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	stages := parseDockerfile(t, b)
	if len(stages) != 2 {
		t.Fatalf("Dockerfile has %d stages, want 2 (build, runtime)", len(stages))
	}
	from := func(stage []dockerInstruction) (image, name string) {
		f := strings.Fields(stage[0].args)
		f = slices.DeleteFunc(f, func(s string) bool { return strings.HasPrefix(s, "--platform=") })
		if len(f) == 3 && strings.EqualFold(f[1], "AS") {
			return f[0], f[2]
		}
		return f[0], ""
	}
	find := func(stage []dockerInstruction, cmd string) []string {
		var out []string
		for _, in := range stage {
			if in.cmd == cmd {
				out = append(out, in.args)
			}
		}
		return out
	}

	// Build stage.
	build := stages[0]
	if img, name := from(build); img != "golang:"+goToolchain(t) || name != "build" {
		t.Errorf("build stage FROM %s AS %s, want golang:%s AS build (go.mod's toolchain, exactly)", img, name, goToolchain(t))
	}
	if env := strings.Join(find(build, "ENV"), " "); !strings.Contains(env, "GOTOOLCHAIN=local") {
		t.Errorf("build stage: ENV %q lacks GOTOOLCHAIN=local (a mismatch would download another toolchain)", env)
	}
	var goBuild string
	for _, r := range find(build, "RUN") {
		if strings.Contains(r, "go build") {
			goBuild = r
		}
	}
	for _, want := range []string{"CGO_ENABLED=0", "-trimpath", "-o /out/parley ./cmd/parley"} {
		if !strings.Contains(goBuild, want) {
			t.Errorf("go build step %q lacks %q", goBuild, want)
		}
	}
	ld := regexp.MustCompile(`-ldflags="([^"]*)"`).FindStringSubmatch(goBuild)
	if ld == nil {
		t.Errorf("go build step %q has no -ldflags=\"...\"", goBuild)
	} else {
		checkLinkFlags(t, "Dockerfile", ld[1])
	}

	// Runtime stage.
	run := stages[1]
	if img, _ := from(run); img != "gcr.io/distroless/static-debian12:nonroot" {
		t.Errorf("runtime stage FROM %s, want gcr.io/distroless/static-debian12:nonroot (static, no shell)", img)
	}
	if cp := find(run, "COPY"); !slices.Contains(cp, "--from=build /out/parley /parley") {
		t.Errorf("runtime stage COPY %q, want --from=build /out/parley /parley", cp)
	}
	users := find(run, "USER")
	if len(users) != 1 {
		t.Fatalf("runtime stage: USER %q, want exactly one", users)
	}
	uid, gid, _ := strings.Cut(users[0], ":")
	if n, err := strconv.Atoi(uid); err != nil || n == 0 {
		t.Errorf("USER %s: want a numeric non-root uid (Kubernetes' runAsNonRoot checks it)", users[0])
	} else {
		// The manifests run the same uid.
		for _, d := range rawManifests(t, "base").deployments {
			if u := d.Spec.Template.Spec.SecurityContext.RunAsUser; u != nil && *u != n {
				t.Errorf("Deployment %s runs as uid %d, the image as %d", d.Metadata.Name, *u, n)
			}
		}
	}
	if g, err := strconv.Atoi(gid); gid != "" && (err != nil || g == 0) {
		t.Errorf("USER %s: want a numeric non-root gid", users[0])
	}
	labels := strings.Join(find(run, "LABEL"), " ")
	for _, l := range []string{"title", "description", "source", "version", "revision", "created"} {
		if !strings.Contains(labels, "org.opencontainers.image."+l+"=") {
			t.Errorf("runtime stage has no LABEL org.opencontainers.image.%s", l)
		}
	}
	if ep := find(run, "ENTRYPOINT"); !slices.Equal(ep, []string{`["/parley"]`}) {
		t.Errorf("ENTRYPOINT %q, want [\"/parley\"]", ep)
	}
	if c := find(run, "CMD"); !slices.Equal(c, []string{`["--help"]`}) {
		t.Errorf("CMD %q; the role must come from the command line, the default is only --help", c)
	}

	// The documented build line tags the image the manifests run.
	if !strings.Contains(string(b), "docker build") || !strings.Contains(string(b), "-t "+manifestImage(t)+":") {
		t.Errorf("Dockerfile does not document `docker build ... -t %s:<version>`", manifestImage(t))
	}
}

// manifestImage is the image name deploy/base gives the parley containers.
func manifestImage(t *testing.T) string {
	t.Helper()
	var k struct {
		Images []struct {
			Name    string `yaml:"name"`
			NewName string `yaml:"newName"`
		} `yaml:"images"`
	}
	b, err := os.ReadFile("base/kustomization.yaml")
	if err == nil {
		err = yaml.Unmarshal(b, &k)
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range k.Images {
		if i.Name == "parley" {
			return i.NewName
		}
	}
	t.Fatal("base/kustomization.yaml renames no image parley")
	return ""
}

// goreleaserConfig is the part of .goreleaser.yaml the test checks.
type goreleaserConfig struct {
	Version int `yaml:"version"`
	Builds  []struct {
		ID      string   `yaml:"id"`
		Main    string   `yaml:"main"`
		Binary  string   `yaml:"binary"`
		Env     []string `yaml:"env"`
		Goos    []string `yaml:"goos"`
		Goarch  []string `yaml:"goarch"`
		Flags   []string `yaml:"flags"`
		Ldflags []string `yaml:"ldflags"`
	} `yaml:"builds"`
	Archives []struct {
		IDs     []string `yaml:"ids"`
		Formats []string `yaml:"formats"`
		Files   []string `yaml:"files"`
	} `yaml:"archives"`
}

// TestGoreleaserConfig parses .goreleaser.yaml and checks that it builds
// ./cmd/parley static for linux and darwin on amd64 and arm64 with the
// version set, archives it, and that every file pattern it ships matches a
// file.
func TestGoreleaserConfig(t *testing.T) {
	b, err := os.ReadFile("../.goreleaser.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cfg goreleaserConfig
	if err := yaml.UnmarshalWithOptions(b, &cfg, yaml.Strict()); err != nil {
		// Strict catches typos, but only in the fields modelled here;
		// retry loosely to report the real error.
		if err2 := yaml.Unmarshal(b, &cfg); err2 != nil {
			t.Fatalf(".goreleaser.yaml: %v", err2)
		}
	}
	if cfg.Version != 2 {
		t.Errorf("version: %d, want 2 (goreleaser v2 configuration)", cfg.Version)
	}
	if len(cfg.Builds) != 1 {
		t.Fatalf("%d builds, want 1", len(cfg.Builds))
	}
	bd := cfg.Builds[0]
	if bd.Main != "./cmd/parley" || bd.Binary != "parley" {
		t.Errorf("build main %q binary %q, want ./cmd/parley and parley", bd.Main, bd.Binary)
	}
	if !slices.Contains(bd.Env, "CGO_ENABLED=0") {
		t.Errorf("build env %v lacks CGO_ENABLED=0 (static, like the image)", bd.Env)
	}
	var targets []string
	for _, os := range bd.Goos {
		for _, arch := range bd.Goarch {
			targets = append(targets, os+"/"+arch)
		}
	}
	slices.Sort(targets)
	if want := []string{"darwin/amd64", "darwin/arm64", "linux/amd64", "linux/arm64"}; !slices.Equal(targets, want) {
		t.Errorf("targets %v, want %v", targets, want)
	}
	checkLinkFlags(t, ".goreleaser.yaml", strings.Join(bd.Ldflags, " "))
	if len(cfg.Archives) == 0 || !slices.Contains(cfg.Archives[0].IDs, bd.ID) {
		t.Fatalf("no archive of build %q", bd.ID)
	}
	for _, pat := range cfg.Archives[0].Files {
		matches, _ := filepath.Glob(filepath.Join("..", strings.ReplaceAll(pat, "**/", "*/")))
		if len(matches) == 0 {
			t.Errorf("archive file pattern %q matches nothing", pat)
		}
	}
}

// goreleaserVersion is the goreleaser release TestGoreleaserCheck runs:
// the newest the module proxy serves that builds with go.mod's toolchain.
const goreleaserVersion = "v2.15.1"

// TestGoreleaserCheck runs goreleaser's own `check` on .goreleaser.yaml
// (go run github.com/goreleaser/goreleaser/v2@v2.15.1 check). Building
// goreleaser takes minutes the first time, so it runs only when asked
// (PARLEY_GORELEASER_CHECK=1) or when a build of it is already cached, and
// skips when the module cannot be fetched (no network).
func TestGoreleaserCheck(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if os.Getenv("PARLEY_GORELEASER_CHECK") == "" {
		// Cached? -n prints the commands without running them; a cached
		// build has no compile step left.
		out, err := exec.CommandContext(ctx, "go", "run", "-n", "github.com/goreleaser/goreleaser/v2@"+goreleaserVersion, "--version").CombinedOutput()
		if err != nil || bytes.Contains(out, []byte("/compile ")) {
			t.Skipf("goreleaser %s is not built yet; PARLEY_GORELEASER_CHECK=1 builds and runs it", goreleaserVersion)
		}
	}
	ctx, cancel = context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "run", "github.com/goreleaser/goreleaser/v2@"+goreleaserVersion, "check", "-f", ".goreleaser.yaml")
	cmd.Dir = ".."
	out, err := cmd.CombinedOutput()
	if err != nil {
		if bytes.Contains(out, []byte("go: downloading")) && (bytes.Contains(out, []byte("dial tcp")) || bytes.Contains(out, []byte("no such host"))) {
			t.Skipf("goreleaser could not be fetched: %s", out)
		}
		t.Fatalf("goreleaser check: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}

// TestVersionOfBuiltBinary runs the binary the package built: `parley
// --version` prints one line with the platform and exits 0. When the
// checkout is a git repository (not a worktree, whose .git Go does not
// read), it also builds with -buildvcs=true and checks the commit it
// prints is HEAD's.
func TestVersionOfBuiltBinary(t *testing.T) {
	parley(t) // the build succeeded
	out, err := exec.Command(parleyBin, "--version").Output()
	if err != nil {
		t.Fatalf("parley --version: %v", err)
	}
	line := strings.TrimSpace(string(out))
	if !regexp.MustCompile(`^parley \S+ .*go1\.\d+.* \w+/\w+$`).MatchString(line) {
		t.Errorf("parley --version printed %q, want \"parley <version> [(commit ...)] go1.N.P os/arch\"", line)
	}

	if fi, err := os.Stat("../.git"); err != nil || !fi.IsDir() {
		t.Skip("not a plain git checkout; the VCS stamp is not checked")
	}
	head, err := exec.Command("git", "-C", "..", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Skipf("git rev-parse HEAD: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "parley")
	if out, err := exec.Command("go", "build", "-buildvcs=true", "-o", bin, "../cmd/parley").CombinedOutput(); err != nil {
		t.Fatalf("go build -buildvcs=true: %v\n%s", err, out)
	}
	out, err = exec.Command(bin, "--version").Output()
	if err != nil {
		t.Fatal(err)
	}
	if want := "(commit " + strings.TrimSpace(string(head))[:12]; !strings.Contains(string(out), want) {
		t.Errorf("parley --version printed %q, want it to contain %q", out, want)
	}
}

// TestResourcesMatchSizing checks that every worker's CPU and memory
// requests and memory limit are the ones docs/OPERATIONS.md derives from the
// bench ("Workers: CPU and memory per turn"), so the two cannot drift apart.
func TestResourcesMatchSizing(t *testing.T) {
	doc, err := os.ReadFile("../docs/OPERATIONS.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile(`(?m)^\| (\w+) \| (\d+m) \| [^|]+ \| (\d+) Mi / (\d+) Mi`)
	sized := map[string][3]string{}
	for _, m := range row.FindAllStringSubmatch(string(doc), -1) {
		sized[m[1]] = [3]string{m[2], m[3] + "Mi", m[4] + "Mi"}
	}
	for _, d := range rawManifests(t, "base").deployments {
		c := d.Spec.Template.Spec.Containers[0]
		role := c.Args[0]
		want, ok := sized[role]
		if !ok {
			t.Errorf("docs/OPERATIONS.md sizes no %s (rows found: %v)", role, sized)
			continue
		}
		got := [3]string{c.Resources.Requests["cpu"], c.Resources.Requests["memory"], c.Resources.Limits["memory"]}
		if got != want {
			t.Errorf("%s: cpu request, memory request, memory limit = %v; docs/OPERATIONS.md sizes it %v", d.Metadata.Name, got, want)
		}
	}
}
