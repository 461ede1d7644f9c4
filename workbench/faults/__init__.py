"""The fault zoo: small planted-fault training scripts with their ground truth."""
