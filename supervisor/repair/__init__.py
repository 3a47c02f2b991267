"""Remediation: guard rails, running a matched rule's steps, verification, escalation."""
