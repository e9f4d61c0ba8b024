//go:build linux

package chaos

import "syscall"

// sysProcAttr makes a child die with the test process (no orphaned
// nats-server or worker if the test binary is killed).
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
