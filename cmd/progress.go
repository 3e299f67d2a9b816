package cmd

import (
	"fmt"
	"sync"
	"time"

	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"
)

// averageRate shows the bytes a second since start, in every frame the bar
// draws: mpb's AverageSpeed computes it only in frames drawn before the end,
// so a read that ended before the first one showed no rate at all.
func averageRate(start time.Time) decor.Decorator {
	return decor.Any(func(s decor.Statistics) string {
		elapsed := time.Since(start).Seconds()
		if elapsed <= 0 {
			return ""
		}
		return fmt.Sprintf(" % .1f/s", decor.SizeB1024(float64(s.Current)/elapsed))
	})
}

// progressMin is the least a read must cover for a bar to be worth drawing.
const progressMin = 64 << 20

// progress is Options.Progress for a person watching a terminal: a bar on
// stderr for a long read (what, bytes done, rate, time left), drawn only when
// stderr is a terminal and the output is for a person (never with -o json or
// tsv), and only for a read of progressMin bytes or more. Each read gets its
// own bar, which ends with it.
func (e env) progress(what string) func(done, total int64) {
	if !isTerminal(e.stderr) || e.Output == "json" || e.Output == "tsv" || e.Output == "prom" {
		return nil
	}
	var (
		mu  sync.Mutex // a server's handles may read at once
		p   *mpb.Progress
		bar *mpb.Bar
	)
	return func(done, total int64) {
		if total < progressMin {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if p == nil {
			p = mpb.New(mpb.WithOutput(e.stderr), mpb.WithWidth(40))
			bar = p.AddBar(total,
				mpb.PrependDecorators(decor.Name(what+" ", decor.WC{C: decor.DindentRight}), decor.CountersKibiByte("% .1f / % .1f")),
				mpb.AppendDecorators(averageRate(time.Now()), decor.Name(" "), decor.OnComplete(decor.AverageETA(decor.ET_STYLE_GO), "done")))
		}
		bar.SetCurrent(done)
		if done >= total {
			p.Wait()
			p, bar = nil, nil // the next read, if any, gets a bar of its own
		}
	}
}
