"""Record headers: Spring's codec, the header policy, a failure's and a replay's headers, bounds."""
