"""Filter stages: heuristics (heuristics.MinLength, GopherQuality, GopherRepetition, C4Lines), the
quality classifier (quality.Quality, quality.train_quality_model), site template lines
(site_lines.SiteLines, by site_shapes' line shapes), and the held-out split (holdout.Holdout,
holdout.held_out_texts).
"""
