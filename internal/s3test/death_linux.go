package s3test

import (
	"os/exec"
	"syscall"
)

// setDeathSignal kills the server if the test process dies without Stop.
func setDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
