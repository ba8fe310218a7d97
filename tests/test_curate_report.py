"""report.md's charts: the PNG files are written by trident.curate.run.report itself (not Pillow's writer)."""
import io

import numpy as np
from PIL import Image

from trident.curate.run.report import _canvas, png_bytes


def test_png_bytes_decode_to_the_drawn_pixels():
    image, draw, font = _canvas("a title")
    draw.rectangle([10, 40, 200, 90], fill="#4c72b0")
    draw.text((20, 120), "fuzzy_dedup 1,234", fill="#222222", font=font)
    decoded = Image.open(io.BytesIO(png_bytes(image)))
    decoded.load()  # verifies every chunk's CRC and the compressed data
    assert decoded.format == "PNG" and decoded.mode == "RGB" and decoded.size == image.size
    assert np.array_equal(np.asarray(decoded), np.asarray(image))
