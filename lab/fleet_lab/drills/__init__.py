"""Drills: the catalogue's faults injected into the running lab, and what the daemon did about
each."""
