"""ProVer adapter for openrlhf (imports openrlhf lazily)."""
