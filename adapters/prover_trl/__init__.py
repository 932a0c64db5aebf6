"""ProVer adapter for trl (imports trl lazily)."""
