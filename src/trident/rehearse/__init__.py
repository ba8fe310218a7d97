"""`trident rehearse`: chosen ranks of a real layout through the real training code on one CPU,
with torch's fake process group (collectives issued, nothing moved) and FakeTensorMode (shapes
without memory or arithmetic), memory measured by category beside `trident plan`'s prediction."""
