"""`python -m agentgraphs.sandbox`: print which protections hold on this machine."""

from .detect import format_report

print(format_report())
