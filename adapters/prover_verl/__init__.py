"""ProVer adapter for verl (imports verl lazily)."""
