"""STAND-INS, NOT macOS: the lab's Mac host and its launchctl, launchd jobs and BSD tools."""
