"""`make demo` and the end-to-end test: the agent on a simulated GPU+RDMA node plus this host's cgroups, scraped by
Debian's prometheus with the DaemonSet's scrape config and recording rules."""
