"""Remediation actions: a registry of small functions with typed params models."""
