"""What a node's hardware is: NFD labels, the host's sysfs, the NodeHardware report."""
