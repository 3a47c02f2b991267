"""Before letting it act: `doctor` (every read-only check against the real hosts), the sudoers
file generated from the rules in force (`sudoers`), and the summary of an observe-only period
(`report`)."""
