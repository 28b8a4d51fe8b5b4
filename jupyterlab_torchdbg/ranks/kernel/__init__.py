"""What runs in the kernel for the ranks: the endpoint, the hub that merges workers into
jobs, their alarms, the all-rank actions and the panel's messages."""
