"""When: back-off delays, durations, reprocessing windows, the due check, event waves."""
