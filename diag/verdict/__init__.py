"""From findings to an answer: the serving path, the gaps, causal links and the verdict, history."""
