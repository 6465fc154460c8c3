"""Moving segments to the remote tier: the remote log manager that schedules copies, remote
retention and deletes (``manager``), the per-partition copier (``copier``) and the segment files it
builds (``segment``), which instance copies which partitions (``ownership``), and how far the
broker's local log may then shrink (``local_retention``)."""
