namespace meshpool {}
