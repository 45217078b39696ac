"""Built-in tasks that need no download (the CPU embedded profile trains on these)."""
