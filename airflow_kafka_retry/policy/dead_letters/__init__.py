"""Every framework's dead letters: decoding, families, fields, queues, framework headers."""
