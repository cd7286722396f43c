"""Settings: every option declared once (`table`), the audit spec that sets them per command (`spec`), presets
(`presets`), and their resolution, flag over spec over preset over default (`resolve`). Parsing a resolved value
into what the core takes (a tuple of corruption names, a size) is `parse`'s. Nothing here loads a model or data:
macs_audit.plan turns settings into inputs."""
