shares_per_gpu = 4
sharing        = "timeslice"
fingerprint_period = "30s"
