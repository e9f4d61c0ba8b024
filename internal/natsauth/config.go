package natsauth

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/nats-io/nkeys"
)

// AuthFile is the name of the rendered nats-server authorization include
// in a credentials directory.
const AuthFile = "auth.conf"

// SeedFile is the name of principal name's nkey seed file in a
// credentials directory.
func SeedFile(name string) string { return name + ".nk" }

// User is a principal with its nkey public key (a "U..." user key).
type User struct {
	Principal
	// PublicKey is the nkey user public key the server authenticates.
	PublicKey string
}

// Render returns the nats-server configuration block
//
//	authorization { users = [ { nkey: U..., permissions: {...} }, ... ] }
//
// granting each user its principal's permissions, for a server
// configuration to include
// (https://docs.nats.io/running-a-nats-service/configuration/securing_nats/auth_intro/nkey_auth).
// Users are in the server's global account, which holds parley's
// streams; with users configured, a connection without credentials is
// refused.
func Render(users []User) string {
	var b bytes.Buffer
	b.WriteString("# parley's NATS principals and permissions, rendered by `parley auth init`\n")
	b.WriteString("# from internal/natsauth (the single source). Public keys only: the seeds\n")
	b.WriteString("# (<principal>.nk) stay with each role. Regenerate instead of editing.\n")
	b.WriteString("authorization {\n  users = [\n")
	for _, u := range users {
		p := u.Permissions()
		fmt.Fprintf(&b, "    # %s: %s\n", u.Name, u.Description)
		fmt.Fprintf(&b, "    {\n      nkey: %s\n      permissions: {\n", u.PublicKey)
		writeList(&b, "publish", p.PublishAllow, p.PublishDeny)
		writeList(&b, "subscribe", p.SubscribeAllow, p.SubscribeDeny)
		if p.AllowResponses {
			b.WriteString("        allow_responses: true\n")
		}
		b.WriteString("      }\n    }\n")
	}
	b.WriteString("  ]\n}\n")
	return b.String()
}

func writeList(b *bytes.Buffer, kind string, allow, deny []string) {
	fmt.Fprintf(b, "        %s: {\n", kind)
	for _, l := range []struct {
		name string
		subs []string
	}{{"allow", allow}, {"deny", deny}} {
		if len(l.subs) == 0 {
			continue
		}
		fmt.Fprintf(b, "          %s: [\n", l.name)
		for _, s := range l.subs {
			fmt.Fprintf(b, "            %s\n", strconv.Quote(s))
		}
		b.WriteString("          ]\n")
	}
	b.WriteString("        }\n")
}

// Init makes dir a credentials directory for ps: one nkey seed per
// principal (<name>.nk, mode 0600; an existing seed is kept, so running
// it again only adds the missing ones) and auth.conf, the rendered
// authorization block (always rewritten from the current table). dir is
// created with mode 0700 when missing. It returns the users.
func Init(dir string, ps []Principal) ([]User, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("credentials directory: %w", err)
	}
	users := make([]User, 0, len(ps))
	for _, p := range ps {
		pub, err := ensureSeed(filepath.Join(dir, SeedFile(p.Name)))
		if err != nil {
			return nil, err
		}
		users = append(users, User{Principal: p, PublicKey: pub})
	}
	path := filepath.Join(dir, AuthFile)
	if err := writeFileAtomic(path, []byte(Render(users)), 0o644); err != nil {
		return nil, err
	}
	return users, nil
}

// ensureSeed returns the public key of the user seed in path, writing a
// new seed there (0600) when the file does not exist.
func ensureSeed(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err == nil {
		kp, err := nkeys.FromSeed(bytes.TrimSpace(data))
		if err != nil {
			return "", fmt.Errorf("%s: not an nkey seed: %w", path, err)
		}
		pub, err := kp.PublicKey()
		if err != nil {
			return "", fmt.Errorf("%s: %w", path, err)
		}
		if !strings.HasPrefix(pub, "U") {
			return "", fmt.Errorf("%s: not a user seed (public key %s…)", path, pub[:1])
		}
		return pub, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	kp, err := nkeys.CreateUser()
	if err != nil {
		return "", err
	}
	seed, err := kp.Seed()
	if err != nil {
		return "", err
	}
	if err := writeFileAtomic(path, append(seed, '\n'), 0o600); err != nil {
		return "", err
	}
	return kp.PublicKey()
}

// writeFileAtomic writes data to path through a temporary file in the
// same directory, so a reader never sees half a file.
func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}
