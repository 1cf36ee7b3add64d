//! Writes timing records and TIMELINE events: JSON lines log (appended, rotated) plus GPU_TIMING / FIN_TIMING lines.
