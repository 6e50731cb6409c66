package load

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTick is the unit of utime and stime in /proc/<pid>/stat: USER_HZ,
// which Linux fixes at 100 on every architecture Go supports.
const clockTick = 10 * time.Millisecond

// CPUTime returns the user and system time the process pid has used, from
// /proc/<pid>/stat.
func CPUTime(pid int) (time.Duration, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	d, err := StatCPU(string(stat))
	if err != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return d, nil
}

// StatCPU returns utime+stime from the text of /proc/<pid>/stat. The
// command name, in parentheses, may hold spaces and parentheses, so fields
// are counted from the last ')': utime and stime are fields 14 and 15.
func StatCPU(stat string) (time.Duration, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("no command name in %q", stat)
	}
	f := strings.Fields(stat[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("%d fields after the command name, want at least 13", len(f))
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("utime %q, stime %q are not numbers", f[11], f[12])
	}
	return time.Duration(utime+stime) * clockTick, nil
}
