//go:build unix && !linux

package chaos

import "syscall"

func sysProcAttr() *syscall.SysProcAttr { return nil }
