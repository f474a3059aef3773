"""Teams, shares, admission and usage metering (filled in by the teams-and-shares work)."""
