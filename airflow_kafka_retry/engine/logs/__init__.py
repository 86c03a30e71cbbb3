"""The compacted log topics the engine keeps: the replay log and the redelivery log."""
