package processor

import (
	"errors"
	"io/fs"
	"os"
	"strings"
)

// Fault injection for the chaos test (chaos/): the processor exits at a
// named point between two steps of a transition, as a SIGKILL would stop
// it there, so the test can check that a redelivery finishes the job.
// Disabled unless the environment asks for it.
const (
	// EnvFaultExit lists fault points (comma-separated) at which the
	// process exits with status 70: "after-supersede" (the thread record
	// that supersedes a paused turn and withdraws its questions is
	// written; elicitation.cancelled is not published yet),
	// "after-pause-record" (a pause's record is stored; the thread does
	// not record the pause yet), "after-resume" (the answer that settles
	// a paused turn's last question is consumed and the turn resumed in
	// the thread record; neither the echo nor run.resumed is published
	// yet).
	EnvFaultExit = "PARLEY_FAULT_EXIT"
	// EnvFaultOnce, when set, is a path prefix: the first exit at a point
	// creates the file <prefix>.<point>, and while it exists that point
	// does not fire again (so a restarted replica does not crash-loop).
	EnvFaultOnce = "PARLEY_FAULT_ONCE"

	faultAfterSupersede   = "after-supersede"
	faultAfterPauseRecord = "after-pause-record"
	faultAfterResume      = "after-resume"
)

type faults struct {
	points []string
	once   string
}

func faultsFromEnv() faults {
	v := os.Getenv(EnvFaultExit)
	if v == "" {
		return faults{}
	}
	return faults{points: strings.Split(v, ","), once: os.Getenv(EnvFaultOnce)}
}

// fault exits the process if point is enabled (and, with EnvFaultOnce, if
// it did not fire before).
func (p *Processor) fault(point string) {
	f := p.faults
	if len(f.points) == 0 {
		return
	}
	for _, fp := range f.points {
		if strings.TrimSpace(fp) != point {
			continue
		}
		if f.once != "" {
			fh, err := os.OpenFile(f.once+"."+point, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
			if errors.Is(err, fs.ErrExist) || err != nil {
				return
			}
			_ = fh.Close()
		}
		p.log.Error("fault injection: exiting", "point", point)
		os.Exit(70)
	}
}
