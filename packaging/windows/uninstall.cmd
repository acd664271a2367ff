@echo off
rem Double-click to remove Nalar's shortcuts and desktop entry; it asks before removing anything else.
rem Arguments pass through: uninstall.cmd -RemoveFiles -RemoveUserData
setlocal
chcp 65001 >nul
powershell.exe -NoProfile -ExecutionPolicy Bypass -File "%~dp0uninstall.ps1" %*
set "NALAR_EXIT=%ERRORLEVEL%"
echo.
pause
exit /b %NALAR_EXIT%
