@echo off
rem Double-click to install Nalar. Windows opens a .ps1 in Notepad, and "Run with PowerShell" closes the
rem window on failure, so this runs install.ps1 with the execution policy bypassed for this run only and
rem keeps the window open until a key is pressed. Arguments pass through: install.cmd -Distro Ubuntu-24.04
setlocal
chcp 65001 >nul
powershell.exe -NoProfile -ExecutionPolicy Bypass -File "%~dp0install.ps1" %*
set "NALAR_EXIT=%ERRORLEVEL%"
echo.
if not "%NALAR_EXIT%"=="0" echo Nalar was not installed. The red line above says why; the yellow line, what to do.
pause
exit /b %NALAR_EXIT%
