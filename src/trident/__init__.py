"""trident: curate web text, train a GPT in 3D parallelism, evaluate it few-shot."""

__version__ = "0.1.0"
