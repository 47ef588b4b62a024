"""Layer 4 (edges): each agent CLI's hooks and installer (Claude Code today)."""
