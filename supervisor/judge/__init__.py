"""Judge: probe results become triggers (policy), /metrics progress tells busy from hung, and the
endpoint state graph (machine) says which move is allowed."""
