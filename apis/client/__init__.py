"""The Kubernetes API client both programs use: an httpx-style transport seam, list/watch with client-go's reflector
backoff, and one exception tree (apis.core.errors)."""
