"""ToolOrchestra: a trained orchestrator routes work to tools and expert models (QA mode, tau^2 mode).

tau^2 mode (`agentgraphs.toolorchestra.tau2`, spec `toolorchestra-tau2`) needs the `tau2` extra.
"""
