"""What a run leaves for people: the log bundle, ``meshrun report``'s figures, and the
redaction every log line and bundle file passes through."""
