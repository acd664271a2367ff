"""The tests, by the package they test (core/, engine/, server/, ui/, commands/, tools/, install/); real/
holds the tests of the whole stack on the real engine; support/ the helpers and data they share."""
