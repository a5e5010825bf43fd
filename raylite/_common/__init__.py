"""Ray's `ray._common` (2.60's home of the test helpers Ray users write their own tests with):
`ray._common.test_utils` is `raylite._common.test_utils`."""
