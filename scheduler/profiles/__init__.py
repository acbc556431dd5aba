"""Engine profiles (the latency model the passes and the critical-path policy read, with the
constants fake engines fall back to) and the profiler that measures and stores them."""
