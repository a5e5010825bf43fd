"""Node providers: where the autoscaler's launches and terminations happen (KubeRay, local hosts)."""
