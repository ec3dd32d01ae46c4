"""The ground floor: errors, timing, and where the rule files and their settings are."""
